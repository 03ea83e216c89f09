"""Recovery from a lost worker: Cohort against TorchElastic, measured the same way on both sides.

    recovery_bench.py ROOT COHORT OUT OUTPUT          (scripts/bench-recovery.sh runs it)

The same job for both (the MLP of examples/fashion-mlp.yaml, Fashion-MNIST, 2 workers, one thread
each, 1 epoch) and the same kill: when the job has completed step BENCH_KILL_STEP, rank 1 is
SIGKILLed from outside. Both keep their state at the same interval (BENCH_INTERVAL steps):
TorchElastic writes a checkpoint that a restart loads, Cohort takes an in-memory snapshot. From the
steps each side logs, for both the same way:
  - to the next step: seconds from the kill to the next completed training step;
  - back to full size: seconds from the kill to the first step completed with both workers again
    (TorchElastic restarts both, so for it the two are the same step; Cohort's survivor goes on
    alone and the replacement joins at a later snapshot);
  - steps lost: the last step completed before the kill minus the step training resumed from.
BENCH_ROUNDS runs of each, interleaved; medians and ranges. Writes the recovery section of
BENCHMARKS.md (between its markers).
"""
import json
import os
import signal
import statistics
import subprocess
import sys
import time

import bench_procs
from bench_procs import spread, wait_quiet
from quiet_report import busy_labels, load_note
from report_text import write_section
from run_files import jsonl

BEGIN, END = "<!-- recovery:begin -->", "<!-- recovery:end -->"
KILL_STEP = int(os.environ.get("BENCH_KILL_STEP", "175"))
INTERVAL = int(os.environ.get("BENCH_INTERVAL", "20"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")


def kill_at_step(proc, completed_step, victim_pid):
    """SIGKILLs the victim once the job has completed KILL_STEP; returns the time of the kill."""
    def kill():
        pid = victim_pid()
        if not pid:
            return None
        t = time.time()
        os.kill(pid, signal.SIGKILL)
        return t
    return bench_procs.kill_at_step("bench-recovery", proc, completed_step, KILL_STEP, kill)


def finish(proc, name, out):
    bench_procs.finish("bench-recovery: " + name, proc, out)


def torchelastic(root, out):
    """One run under torchrun; returns its measurement."""
    te = out
    os.makedirs(te)
    log = open(os.path.join(te, "torchrun.log"), "w")
    proc = subprocess.Popen(
        ["/usr/bin/python3", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
         "2", "--max_restarts", "1", "--monitor_interval", "1", "--redirects", "1", "--tee", "1",
         os.path.join(root, "bench", "torchelastic_recovery.py"), "--run-dir", te,
         "--checkpoint-every", str(INTERVAL), "--seed", "0"],
        stdout=log, stderr=subprocess.STDOUT, env=ENV, start_new_session=True)

    def steps(attempt):
        rows = []
        for r in (0, 1):
            try:
                for line in open(os.path.join(te, "steps-%d.txt" % r)):
                    p = line.split()
                    if len(p) == 3 and int(p[0]) == attempt:
                        rows.append((int(p[1]), float(p[2])))
            except FileNotFoundError:
                pass
        return rows

    def victim():
        try:
            return int(open(os.path.join(te, "pid-1-0")).read())
        except (FileNotFoundError, ValueError):
            return 0

    kill = kill_at_step(proc, lambda: max([s for s, _ in steps(0)], default=0), victim)
    finish(proc, "torchrun", te)
    resumed = int(open(os.path.join(te, "resumed-1")).read())
    before, after = steps(0), steps(1)
    first = min(t for _, t in after) - kill  # a restart runs at full size from its first step
    return {"killed_after_step": max(s for s, _ in before), "resumed_from_step": resumed,
            "steps_lost": max(s for s, _ in before) - resumed, "next_step_s": first,
            "full_size_s": first}


def cohort(root, binary, out):
    """One `cohort run` with a replacement allowed; returns its measurement."""
    log = open(out + ".log", "w")
    proc = subprocess.Popen(
        [binary, "run", os.path.join(root, "examples", "fashion-mlp.yaml"), "--run-dir", out,
         "--set", "workers=2", "--set", "threads_per_worker=1", "--set", "train.epochs=1",
         "--set", "train.batch_size=64", "--set", "train.seed=0",
         "--set", "train.log_every_steps=1", "--set", "checkpoint.every_steps=0",
         "--set", "elastic.min_workers=1", "--set", "elastic.max_restarts=1",
         "--set", "elastic.heartbeat_s=0.2", "--set", "elastic.failure_timeout_s=1",
         "--set", "elastic.snapshot_every_steps=%d" % INTERVAL],
        stdout=log, stderr=subprocess.STDOUT, env=ENV, start_new_session=True)

    def victim():
        for e in jsonl(os.path.join(out, "events.jsonl")):
            if e.get("event") == "worker_started" and e.get("rank") == 1:
                return e["pid"]
        return 0

    def completed():
        return max([m["step"] for m in jsonl(os.path.join(out, "metrics.jsonl"))], default=0)

    kill = kill_at_step(proc, completed, victim)
    finish(proc, "cohort run", out)
    events = jsonl(os.path.join(out, "events.jsonl"))
    steps = [(m["step"], m["time"], m["world_size"]) for m in jsonl(os.path.join(out, "metrics.jsonl"))]
    # The survivor's membership epoch trains at world size 1, the replacement's at 2 again: the
    # progress records say which (a step in flight at the kill may still complete at size 2).
    before = [s for s, t, _ in steps if t < kill]
    alone = [t for _, t, w in steps if t > kill and w == 1]
    if not alone:
        raise SystemExit("bench-recovery: no step after the kill; see %s" % out)
    back = [t for _, t, w in steps if t > alone[0] and w == 2]
    if not back:
        raise SystemExit("bench-recovery: the replacement never joined; see %s" % out)
    rolled = [e for e in events if e.get("event") == "rolled_back"]
    summary = json.load(open(os.path.join(out, "summary.json")))
    return {"killed_after_step": max(before), "resumed_from_step": rolled[0]["restored_step"],
            "steps_lost": max(before) - rolled[0]["restored_step"],
            "next_step_s": alone[0] - kill, "full_size_s": back[0] - kill,
            "own_recovery_s": summary["recovery_seconds_max"],
            "snapshot_s": max(r.get("snapshot_seconds", 0) for r in summary["per_rank"])}


def report(runs, output, started, load_before, quiet_log):
    te, co = runs["torchelastic"], runs["cohort"]
    med = lambda rs, k: statistics.median(r[k] for r in rs)
    busy = bool(busy_labels(quiet_log))
    mark = " (busy)" if busy else ""
    next_x = med(te, "next_step_s") / med(co, "next_step_s")
    full_x = med(te, "full_size_s") / med(co, "full_size_s")
    lost_ok = med(co, "steps_lost") <= med(te, "steps_lost")
    verdict = lambda ok: "(busy)" if busy else ("met" if ok else "**missed**")
    cpu = bench_procs.cpu_model()
    rows = []
    for name, rs in [("TorchElastic", te), ("Cohort", co)]:
        rows.append("| %s | %s | %s | %s | %s |" % (
            name, spread([r["steps_lost"] for r in rs], "%d"),
            spread([r["next_step_s"] for r in rs]), spread([r["full_size_s"] for r in rs]),
            ", ".join("%d→%d" % (r["killed_after_step"], r["resumed_from_step"]) for r in rs)))
    lines = [
        BEGIN, "## Recovery from a lost worker: Cohort vs TorchElastic", "",
        "Command: `scripts/bench-recovery.sh` (`make bench-recovery`, BENCH_ROUNDS=%d "
        "BENCH_INTERVAL=%d BENCH_KILL_STEP=%d). Machine: %d CPUs (%s), Linux %s. Run %s, %.0f s, "
        "load average before %.1f, after %.1f." % (
            ROUNDS, INTERVAL, KILL_STEP, os.cpu_count(), cpu, os.uname().release,
            time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), time.time() - started,
            load_before[0], os.getloadavg()[0]), "",
        load_note(quiet_log), "",
        "The same job for both: the MLP of `examples/fashion-mlp.yaml` on Fashion-MNIST, 2 workers, "
        "one thread each, batch 64 per worker, SGD lr 0.05 momentum 0.9, 1 epoch (469 steps). When "
        "the job has completed step %d, a watcher SIGKILLs rank 1 from outside. Both keep their "
        "state every %d steps: TorchElastic (Debian's python3-torch 1.13, `torchrun --standalone "
        "--nproc_per_node 2 --max_restarts 1 --monitor_interval 1`, `bench/torchelastic_recovery.py`) "
        "writes a checkpoint that its restart loads; Cohort (`elastic: {min_workers: 1, "
        "max_restarts: 1, heartbeat_s: 0.2, failure_timeout_s: 1, snapshot_every_steps: %d}`) "
        "takes an in-memory snapshot. torchrun restarts both workers; Cohort's survivor goes on "
        "alone from the last snapshot and `cohort run` starts a replacement that joins at a later "
        "snapshot." % (KILL_STEP, INTERVAL, INTERVAL), "",
        "Measured from outside, the same way for both (step times logged by the workers, one "
        "clock): *to the next step* = seconds from the kill to the next completed training step; "
        "*back to full size* = seconds from the kill to the first step completed by both workers "
        "again (for TorchElastic the same step: it restarts at full size); *steps lost* = last "
        "step completed before the kill − step training resumed from (where a kill lands between "
        "two saves decides it: between 0 and the interval, for both). %d runs of each, "
        "interleaved; median (min–max)." % ROUNDS, "",
        "| | steps lost | to the next step, s | back to full size, s | killed after → resumed "
        "from |", "|---|---|---|---|---|"] + rows + [
        "", "| target | ratio (medians) | |", "|---|---:|---|",
        "| ≥ 10× faster to the next step | %.1f×%s | %s |" % (next_x, mark,
                                                               verdict(next_x >= 10)),
        "| ≥ 3× faster back to full size | %.1f×%s | %s |" % (full_x, mark,
                                                               verdict(full_x >= 3)),
        "| steps lost no more than TorchElastic's at the same interval | %g vs %g%s | %s |" % (
            med(co, "steps_lost"), med(te, "steps_lost"), mark, verdict(lost_ok)),
        "",
        "Cohort's own `recovery_seconds_max` (from the failure it detected to the first step "
        "after): %s s; its snapshots cost %s s over a whole run (`snapshot_seconds`, the most of "
        "any worker). Back at full size, most of Cohort's time is the replacement's own start (a "
        "new process loading libtorch and the data set) and its wait for the next snapshot "
        "boundary." % (spread([r["own_recovery_s"] for r in co]),
                       spread([r["snapshot_s"] for r in co], "%.3f")),
        END]
    write_section(output, BEGIN, END, lines)


def main(argv):
    root, binary, out, output = argv[1:5]
    started, load_before = time.time(), os.getloadavg()
    runs = {"torchelastic": [], "cohort": []}
    for k in range(ROUNDS):
        print("bench-recovery: round %d/%d: TorchElastic" % (k + 1, ROUNDS), flush=True)
        wait_quiet(root, "torchelastic r%d" % (k + 1))
        runs["torchelastic"].append(torchelastic(root, os.path.join(out, "torchelastic-%d" % k)))
        print("bench-recovery:", json.dumps(runs["torchelastic"][-1]), flush=True)
        print("bench-recovery: round %d/%d: Cohort" % (k + 1, ROUNDS), flush=True)
        wait_quiet(root, "cohort r%d" % (k + 1))
        runs["cohort"].append(cohort(root, binary, os.path.join(out, "cohort-%d" % k)))
        print("bench-recovery:", json.dumps(runs["cohort"][-1]), flush=True)
    json.dump(runs, open(os.path.join(out, "results.json"), "w"), indent=2)
    report(runs, output, started, load_before, os.environ["QUIET_LOG"])


if __name__ == "__main__":
    main(sys.argv)
