"""Losing the coordinator: Cohort with its store in etcd and a standby coordinator, against
TorchElastic with its etcd-v2 rendezvous, on the same job, measured the same way on both sides.

    coordinator_loss_bench.py ROOT COHORT OUT OUTPUT     (scripts/bench-coordinator-loss.sh runs it)

The job of the recovery benchmark (the MLP of examples/fashion-mlp.yaml, Fashion-MNIST, 2 workers,
one thread each, batch 64, 1 epoch), its rendezvous and job state in one etcd (Debian's 3.4, v2 API
on for TorchElastic), started for each run and stopped after it. When the job has completed step
BENCH_KILL_STEP:
  - Cohort: `cohort run` (the coordinator; it started the two workers) is SIGKILLed; a standby
    (`cohort run --standby`) started beside it takes the job over through its etcd lease.
  - TorchElastic: two agents (`torchrun --nnodes 1:2 --nproc_per_node 1 --rdzv-backend etcd-v2`),
    one worker each; the agent whose worker is rank 0 is SIGKILLed with its worker (its process
    group: what a node's death does). The other agent's worker fails, the agent restarts it and
    rendezvouses again, and it trains on alone from the last checkpoint (every BENCH_INTERVAL steps).
Not the same failure (TorchElastic's agent takes its node's workers with it; Cohort's coordinator
runs no training), and the report says so. From the steps each side's workers log, the same way:
  - to the next step: seconds from the kill to the next completed training step;
  - steps rolled back: the last step completed before the kill minus the step training went on
    from.
For Cohort also when the standby led (its `coordinator_took_over` event). BENCH_ROUNDS runs of each,
interleaved; medians and ranges. Writes the coordinator-loss section of BENCHMARKS.md.
"""
import json
import os
import signal
import statistics
import subprocess
import sys
import time

import bench_procs
from bench_procs import BenchError, Etcd, spread, wait_quiet
from quiet_report import busy_labels, load_note
from report_text import write_section
from run_files import jsonl

BEGIN, END = "<!-- coordinator-loss:begin -->", "<!-- coordinator-loss:end -->"
NAME = "bench-coordinator-loss"
KILL_STEP = int(os.environ.get("BENCH_KILL_STEP", "175"))
INTERVAL = int(os.environ.get("BENCH_INTERVAL", "20"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
LAST_CALL = int(os.environ.get("BENCH_LAST_CALL_S", "1"))
FAILURE_TIMEOUT = float(os.environ.get("BENCH_FAILURE_TIMEOUT_S", "2"))
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")


def torchelastic_steps(run_dir):
    """(attempt, step, time) of every step any worker logged."""
    rows = []
    for r in (0, 1):
        try:
            for line in open(os.path.join(run_dir, "steps-%d.txt" % r)):
                p = line.split()
                if len(p) == 3:
                    rows.append((int(p[0]), int(p[1]), float(p[2])))
        except FileNotFoundError:
            pass
    return rows


def torchelastic(root, binary, out, etcd):
    """Two agents under the etcd-v2 rendezvous; the first node's agent dies with its worker.
    (`binary`, Cohort's, is not used: both sides are called alike.)"""
    os.makedirs(out)
    agents = []
    for node in (0, 1):
        log = open(os.path.join(out, "agent-%d.log" % node), "w")
        agents.append(subprocess.Popen(
            ["/usr/bin/python3", "-m", "torch.distributed.run", "--nnodes", "1:2",
             "--nproc_per_node", "1", "--rdzv_backend", "etcd-v2", "--rdzv_endpoint",
             etcd.endpoint(), "--rdzv_id", os.path.basename(out), "--rdzv_conf",
             "last_call_timeout=%d" % LAST_CALL, "--max_restarts", "3", "--monitor_interval",
             "1", "--redirects", "1", "--tee", "1",
             os.path.join(root, "bench", "torchelastic_recovery.py"), "--run-dir", out,
             "--checkpoint-every", str(INTERVAL), "--seed", "0"],
            stdout=log, stderr=subprocess.STDOUT, env=ENV, start_new_session=True))

    killed = []

    def kill():
        try:
            worker = int(open(os.path.join(out, "pid-0-0")).read())
            group = os.getpgid(worker)  # the agent's: it and its worker are the node
        except (FileNotFoundError, ValueError, ProcessLookupError):
            return None
        t = time.time()
        os.killpg(group, signal.SIGKILL)
        killed.append(group)
        return t

    completed = lambda: max([s for a, s, _ in torchelastic_steps(out) if a == 0], default=0)
    try:
        kill_t = bench_procs.kill_at_step(NAME + ": torchrun", agents[1], completed, KILL_STEP,
                                          kill)
        survivors = [a for a in agents if a.pid not in killed]
        if len(survivors) != 1:
            raise BenchError("%s: the killed agent is not one of the two; see %s" % (NAME, out))
        bench_procs.finish(NAME + ": the surviving torchrun agent", survivors[0], out)
    finally:
        for a in agents:
            bench_procs.kill_group(a)
            a.wait()
    steps = torchelastic_steps(out)
    before = [s for _, s, t in steps if t < kill_t]
    after = [t for a, _, t in steps if a >= 1]
    if not after:
        raise BenchError("%s: TorchElastic logged no step after the kill; see %s" % (NAME, out))
    resumed = int(open(os.path.join(out, "resumed-1")).read())
    return {"killed_after_step": max(before), "resumed_from_step": resumed,
            "steps_rolled_back": max(before) - resumed, "next_step_s": min(after) - kill_t}


def job_address(run_dir, proc, limit_s=120):
    deadline = time.time() + limit_s
    while time.time() < deadline:
        for e in jsonl(os.path.join(run_dir, "events.jsonl")):
            if e.get("event") == "job_started" and e.get("coordinator"):
                return e["coordinator"]
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise BenchError("%s: no job_started event in %s" % (NAME, run_dir))


def wait_for_text(path, text, proc, limit_s=120):
    deadline = time.time() + limit_s
    while time.time() < deadline:
        try:
            if text in open(path).read():
                return
        except FileNotFoundError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise BenchError("%s: %r not in %s" % (NAME, text, path))


def cohort(root, binary, out, etcd):
    """`cohort run` with its store in etcd, a standby beside it; the first is SIGKILLed alone."""
    os.makedirs(out)
    first_dir, standby_dir = os.path.join(out, "first"), os.path.join(out, "standby")
    first = subprocess.Popen(
        [binary, "run", os.path.join(root, "examples", "fashion-mlp.yaml"), "--run-dir",
         first_dir, "--set", "workers=2", "--set", "threads_per_worker=1", "--set",
         "train.epochs=1", "--set", "train.batch_size=64", "--set", "train.seed=0", "--set",
         "train.log_every_steps=1", "--set", "checkpoint.every_steps=0", "--set",
         "elastic.heartbeat_s=0.2", "--set", "elastic.failure_timeout_s=%g" % FAILURE_TIMEOUT,
         "--set", "coordinator.store=etcd://%s/jobs" % etcd.endpoint()],
        stdout=open(first_dir + ".log", "w"), stderr=subprocess.STDOUT, env=ENV,
        start_new_session=True)
    standby = None
    try:
        where = job_address(first_dir, first)
        standby = subprocess.Popen(
            [binary, "run", "--standby", where, "--run-dir", standby_dir],
            stdout=open(standby_dir + ".log", "w"), stderr=subprocess.STDOUT, env=ENV,
            start_new_session=True)
        wait_for_text(standby_dir + ".log", "taking it over when that is gone", standby)

        def kill():
            t = time.time()
            os.kill(first.pid, signal.SIGKILL)  # the coordinator alone: its workers live on
            return t

        completed = lambda: max(
            [m["step"] for m in jsonl(os.path.join(first_dir, "metrics.jsonl"))], default=0)
        kill_t = bench_procs.kill_at_step(NAME + ": cohort run", first, completed, KILL_STEP,
                                          kill)
        first.wait()
        bench_procs.finish(NAME + ": the standby coordinator", standby, standby_dir)
    finally:
        for p in [first, standby]:
            if p is not None:
                bench_procs.kill_group(p)
                p.wait()
    steps = [(m["step"], m["time"]) for d in (first_dir, standby_dir)
             for m in jsonl(os.path.join(d, "metrics.jsonl"))]
    before = [s for s, t in steps if t < kill_t]
    after = [t for _, t in steps if t > kill_t]
    took = [e for e in jsonl(os.path.join(standby_dir, "events.jsonl"))
            if e.get("event") == "coordinator_took_over"]
    summary = json.load(open(os.path.join(standby_dir, "summary.json")))
    if not after or not took or summary.get("status") != "completed":
        raise BenchError("%s: the standby did not carry the job to its end; see %s" % (NAME, out))
    return {"killed_after_step": max(before), "steps_rolled_back": summary["steps_rolled_back"],
            "next_step_s": min(after) - kill_t, "took_over_s": took[0]["time"] - kill_t,
            "workers_lost": summary["workers_lost"]}


def report(runs, output, started, load_before, quiet_log):
    te, co = runs["torchelastic"], runs["cohort"]
    med = lambda rs, k: statistics.median(r[k] for r in rs)
    busy = bool(busy_labels(quiet_log))
    mark = " (busy)" if busy else ""
    next_x = med(te, "next_step_s") / med(co, "next_step_s")
    verdict = lambda ok: "(busy)" if busy else ("met" if ok else "**missed**")
    cpu = bench_procs.cpu_model()
    rolled = max(r["steps_rolled_back"] for r in co)
    lines = [
        BEGIN, "## Losing the coordinator: Cohort's etcd standby vs TorchElastic's etcd-v2 "
        "rendezvous", "",
        "Command: `scripts/bench-coordinator-loss.sh` (`make bench-coordinator-loss`, "
        "BENCH_ROUNDS=%d BENCH_KILL_STEP=%d BENCH_INTERVAL=%d BENCH_LAST_CALL_S=%d "
        "BENCH_FAILURE_TIMEOUT_S=%g). Machine: %d CPUs (%s), Linux %s. Run %s, %.0f s, load "
        "average before %.1f, after %.1f." % (
            ROUNDS, KILL_STEP, INTERVAL, LAST_CALL, FAILURE_TIMEOUT, os.cpu_count(), cpu,
            os.uname().release, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            time.time() - started, load_before[0], os.getloadavg()[0]), "",
        load_note(quiet_log), "",
        "The job of the recovery benchmark for both (the MLP of `examples/fashion-mlp.yaml`, "
        "Fashion-MNIST, 2 workers, one thread each, batch 64, 1 epoch), its rendezvous and state "
        "in one etcd member (Debian's etcd 3.4, `--enable-v2` for TorchElastic), a fresh one per "
        "run. When the job has completed step %d: **Cohort** — `cohort run` with "
        "`coordinator.store: etcd://…` and `elastic: {heartbeat_s: 0.2, failure_timeout_s: %g}` "
        "(the coordinator; it started the workers) is SIGKILLed, alone; `cohort run --standby` "
        "started beside it takes the job over through its etcd lease. **TorchElastic** — two "
        "agents, `torchrun --nnodes 1:2 --nproc_per_node 1 --rdzv-backend etcd-v2 --rdzv-conf "
        "last_call_timeout=%d --max_restarts 3 --monitor_interval 1` (Debian's python3-torch 1.13 "
        "and python3-etcd; `bench/torchelastic_recovery.py`, a checkpoint every %d steps), one "
        "worker each; the agent whose worker is rank 0 is SIGKILLed with that worker (its process "
        "group, as a node's death would); the other agent restarts its worker, rendezvouses "
        "again and trains on alone from the last checkpoint. **Not the same failure**: "
        "TorchElastic has no process that only coordinates (its rendezvous lives in etcd and "
        "in every agent), so losing the agent that would correspond to Cohort's coordinator "
        "takes a node's workers with it; Cohort's coordinator trains nothing, and its workers do "
        "not need it to go on training. `last_call_timeout=%d` is TorchElastic at its fastest "
        "(its default, 30 s, adds the difference to every rendezvous after a failure)." % (
            KILL_STEP, FAILURE_TIMEOUT, LAST_CALL, INTERVAL, LAST_CALL), "",
        "Measured from outside, the same way for both, from the steps the workers log (one "
        "clock): *to the next step* = seconds from the kill to the next completed training step; "
        "*steps rolled back* = last step completed before the kill − step training went on from. "
        "For Cohort also *standby leads* = seconds from the kill to the standby's "
        "`coordinator_took_over` event. %d runs of each, interleaved; median (min–max)." % ROUNDS,
        "",
        "| | to the next step, s | steps rolled back | standby leads, s | killed after step |",
        "|---|---|---|---|---|",
        "| TorchElastic (etcd-v2) | %s | %s | — | %s |" % (
            spread([r["next_step_s"] for r in te], "%.3f"),
            spread([r["steps_rolled_back"] for r in te], "%d"),
            ", ".join(str(r["killed_after_step"]) for r in te)),
        "| Cohort (etcd, standby) | %s | %s | %s | %s |" % (
            spread([r["next_step_s"] for r in co], "%.3f"),
            spread([r["steps_rolled_back"] for r in co], "%d"),
            spread([r["took_over_s"] for r in co]),
            ", ".join(str(r["killed_after_step"]) for r in co)),
        "", "| target | result | |", "|---|---:|---|",
        "| ≥ 5× faster to the next step | %.0f×%s | %s |" % (next_x, mark, verdict(next_x >= 5)),
        "| zero steps rolled back | %d (most of any run)%s | %s |" % (rolled, mark,
                                                                      verdict(rolled == 0)),
        "",
        "Counted to when the standby leads instead of to the next step, Cohort is still %.1f× "
        "faster than TorchElastic's next step." % (
            med(te, "next_step_s") / med(co, "took_over_s")), "",
        "Cohort's next step comes one step time after the kill because its workers never stop: "
        "heartbeats, progress records and the membership they train in are in etcd, not in the "
        "coordinator, so the gap until the standby leads is spent training. TorchElastic's "
        "survivor waits for its worker's collective to fail, the agent's next monitor tick, the "
        "dead agent's keep-alive key in etcd to expire (10 s, fixed in its etcd rendezvous), the "
        "last call, and a new worker process (Python, torch and the data set) before it trains "
        "again, from its last checkpoint.",
        END]
    write_section(output, BEGIN, END, lines)


def main(argv):
    root, binary, out, output = argv[1:5]
    started, load_before = time.time(), os.getloadavg()
    runs = {"torchelastic": [], "cohort": []}
    for k in range(ROUNDS):
        for side, fn in [("torchelastic", torchelastic), ("cohort", cohort)]:
            print("%s: round %d/%d: %s" % (NAME, k + 1, ROUNDS, side), flush=True)
            wait_quiet(root, "%s r%d" % (side, k + 1))
            with Etcd(os.path.join(out, "etcd-%s-%d" % (side, k))) as etcd:
                runs[side].append(fn(root, binary, os.path.join(out, "%s-%d" % (side, k)), etcd))
            print("%s:" % NAME, json.dumps(runs[side][-1]), flush=True)
    json.dump(runs, open(os.path.join(out, "results.json"), "w"), indent=2)
    report(runs, output, started, load_before, os.environ["QUIET_LOG"])


if __name__ == "__main__":
    main(sys.argv)
