"""Rendezvous of many workers: Cohort through its embedded store and through etcd, against torchrun
with its c10d and etcd-v2 rendezvous, measured the same way on both sides.

    rendezvous_bench.py ROOT COHORT OUT OUTPUT      (scripts/bench-rendezvous.sh runs it)

BENCH_WORKERS (128) worker processes on this machine, a tiny job: Cohort's `mlp` (784-256-128-10)
on a synthetic data set, batch 8, one thread per worker. Measured for each: seconds from the launch
command's start (`cohort run`; the first torchrun agent) to the end of the first training step on
rank 0, which cannot end before every worker has joined the step's allreduce. Cohort: `cohort run`
starting every worker itself, the store embedded in it or in etcd (`coordinator.store`). torchrun:
one agent per BENCH_PER_AGENT (8) workers, `--rdzv-backend c10d` (the first agent hosts the store)
and `--rdzv-backend etcd-v2`, started together; bench/torch_rendezvous.py (DDP over Gloo, one step).
A fresh etcd (Debian's 3.4) for each etcd run. BENCH_ROUNDS runs of each, interleaved. Writes the
rendezvous section of BENCHMARKS.md.
"""
import json
import os
import statistics
import subprocess
import sys
import time

import bench_procs
from bench_procs import BenchError, Etcd, free_port, spread, wait_quiet
from quiet_report import busy_labels, load_note
from report_text import write_section
from run_files import jsonl

BEGIN, END = "<!-- rendezvous:begin -->", "<!-- rendezvous:end -->"
NAME = "bench-rendezvous"
WORKERS = int(os.environ.get("BENCH_WORKERS", "128"))
PER_AGENT = int(os.environ.get("BENCH_PER_AGENT", "8"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "2"))
LIMIT_S = int(os.environ.get("BENCH_LIMIT_S", "600"))
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
ALL_ARMS = ["cohort:embedded", "cohort:etcd", "torchrun:c10d", "torchrun:etcd-v2"]
ARMS = os.environ.get("BENCH_ARMS", " ".join(ALL_ARMS)).split()


def wait_for(path_value, procs, what, out):
    """Polls path_value() (None until there) until it returns a value, every process of procs is
    still running or ended well, and LIMIT_S has not passed."""
    deadline = time.time() + LIMIT_S
    while time.time() < deadline:
        v = path_value()
        if v is not None:
            return v
        for p in procs:
            rc = p.poll()
            if rc is not None and rc != 0:
                raise BenchError("%s: %s failed (exit %d); see %s" % (NAME, what, rc, out))
        time.sleep(0.05)
    raise BenchError("%s: %s reached no first step in %d s; see %s" % (NAME, what, LIMIT_S, out))


def cohort(root, binary, out, etcd):
    os.makedirs(out)
    sets = ["workers=%d" % WORKERS, "threads_per_worker=1", "model={name: mlp}",
            "data={name: synthetic, samples: %d}" % (WORKERS * 8 * 4), "train.epochs=1",
            "train.max_steps=3", "train.batch_size=8", "train.log_every_steps=1",
            "checkpoint.every_steps=0"]
    if etcd is not None:
        sets.append("coordinator.store=etcd://%s/jobs" % etcd.endpoint())
    argv = [binary, "run", os.path.join(root, "examples", "fashion-mlp.yaml"), "--run-dir",
            os.path.join(out, "run")]
    for s in sets:
        argv += ["--set", s]
    started = time.time()
    proc = subprocess.Popen(argv, stdout=open(os.path.join(out, "run.log"), "w"),
                            stderr=subprocess.STDOUT, env=ENV, start_new_session=True)
    try:
        def first():
            steps = [m["time"] for m in jsonl(os.path.join(out, "run", "metrics.jsonl"))
                     if m.get("step") == 1]
            return steps[0] if steps else None
        t = wait_for(first, [proc], "cohort run", out)
        bench_procs.finish(NAME + ": cohort run", proc, out, LIMIT_S)
    finally:
        bench_procs.kill_group(proc)
        proc.wait()
    return {"first_step_s": t - started}


def torchrun(root, out, backend, etcd):
    os.makedirs(out)
    agents = WORKERS // PER_AGENT
    if backend == "c10d":
        endpoint, conf = "127.0.0.1:%d" % free_port(), []
    else:
        endpoint, conf = etcd.endpoint(), ["--rdzv_conf", "last_call_timeout=1"]
    procs = []
    started = time.time()
    try:
        for a in range(agents):
            procs.append(subprocess.Popen(
                ["/usr/bin/python3", "-m", "torch.distributed.run", "--nnodes", str(agents),
                 "--nproc_per_node", str(PER_AGENT), "--rdzv_backend", backend, "--rdzv_endpoint",
                 endpoint, "--rdzv_id", os.path.basename(out)] + conf +
                ["--monitor_interval", "1", "--redirects", "1", "--tee", "1",
                 os.path.join(root, "bench", "torch_rendezvous.py"), "--run-dir", out],
                stdout=open(os.path.join(out, "agent-%d.log" % a), "w"),
                stderr=subprocess.STDOUT, env=ENV, start_new_session=True))

        def first():
            try:
                return float(open(os.path.join(out, "first-step")).read())
            except (FileNotFoundError, ValueError):
                return None
        t = wait_for(first, procs, "torchrun (%s)" % backend, out)
        for a, p in enumerate(procs):
            bench_procs.finish("%s: torchrun agent %d" % (NAME, a), p, out, LIMIT_S)
    finally:
        for p in procs:
            bench_procs.kill_group(p)
            p.wait()
    return {"first_step_s": t - started}


def run_arm(root, binary, out, arm):
    side, store = arm.split(":")
    needs_etcd = store in ("etcd", "etcd-v2")
    etcd = Etcd(out + "-etcd") if needs_etcd else None
    try:
        if side == "cohort":
            return cohort(root, binary, out, etcd)
        return torchrun(root, out, store, etcd)
    finally:
        if etcd is not None:
            etcd.close()


def report(runs, output, started, load_before, quiet_log):
    busy = bool(busy_labels(quiet_log))
    mark = " (busy)" if busy else ""
    med = {a: statistics.median(r["first_step_s"] for r in runs[a]) for a in runs}
    verdict = lambda ok: "(busy)" if busy else ("met" if ok else "**missed**")
    cpu = bench_procs.cpu_model()
    label = {"cohort:embedded": "Cohort, embedded store",
             "cohort:etcd": "Cohort, store in etcd",
             "torchrun:c10d": "torchrun, c10d rendezvous",
             "torchrun:etcd-v2": "torchrun, etcd-v2 rendezvous"}
    rows = ["| %s | %s |" % (label[a], spread([r["first_step_s"] for r in runs[a]], "%.1f"))
            for a in ARMS]
    fastest_torch = min(med["torchrun:c10d"], med["torchrun:etcd-v2"])
    targets = []
    for a in ["cohort:embedded", "cohort:etcd"]:
        targets.append("| %s: under 20 s | %.1f s%s | %s |" % (label[a], med[a], mark,
                                                               verdict(med[a] < 20)))
        targets.append("| %s: faster than torchrun's faster rendezvous | %.2f×%s | %s |" % (
            label[a], fastest_torch / med[a], mark, verdict(med[a] < fastest_torch)))
    lines = [
        BEGIN, "## Rendezvous of %d workers: Cohort vs torchrun" % WORKERS, "",
        "Command: `scripts/bench-rendezvous.sh` (`make bench-rendezvous`, BENCH_WORKERS=%d "
        "BENCH_PER_AGENT=%d BENCH_ROUNDS=%d). Machine: %d CPUs (%s), Linux %s. Run %s, %.0f s, "
        "load average before %.1f, after %.1f." % (
            WORKERS, PER_AGENT, ROUNDS, os.cpu_count(), cpu, os.uname().release,
            time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), time.time() - started,
            load_before[0], os.getloadavg()[0]), "",
        load_note(quiet_log), "",
        "%d worker processes on this machine, the same tiny job for both: the `mlp` "
        "(784-256-128-10) on synthetic data, batch 8, one thread per worker. **Cohort**: one "
        "`cohort run` starts every worker, its store embedded in the coordinator or in a fresh "
        "etcd member (Debian's 3.4; `coordinator.store: etcd://…`). **torchrun** (Debian's "
        "python3-torch 1.13): %d agents of %d workers each, started together, `--rdzv-backend "
        "c10d` (the first agent hosts the store) or `--rdzv-backend etcd-v2` (python3-etcd, the "
        "same etcd, `last_call_timeout=1`, TorchElastic at its fastest), running "
        "`bench/torch_rendezvous.py` (the Gloo process group, DDP, one step). Measured the same "
        "way for both: seconds from the launch command's start (`cohort run`; the first agent) to "
        "the end of the first training step on rank 0, which cannot end before every worker has "
        "joined the step's allreduce. On these %d cores starting the processes is most of it: "
        "each torchrun worker starts Python and imports torch (about 1 s of CPU), and so does "
        "each agent; Cohort's workers are forked from one spawner that has libtorch loaded "
        "(docs/clusters.md), and the rest of their time is their own start (store "
        "connections, data, model), the rendezvous and the first collectives among 128 ranks. "
        "%d runs of each, interleaved; median (min–max)." %
        (WORKERS, WORKERS // PER_AGENT, PER_AGENT, os.cpu_count(), ROUNDS), "",
        "| | to the first step, s |", "|---|---|"] + rows + [
        "", "| target | result | |", "|---|---:|---|"] + targets + [END]
    write_section(output, BEGIN, END, lines)


def main(argv):
    root, binary, out, output = argv[1:5]
    started, load_before = time.time(), os.getloadavg()
    runs = {a: [] for a in ARMS}
    for k in range(ROUNDS):
        for arm in ARMS:
            print("%s: round %d/%d: %s" % (NAME, k + 1, ROUNDS, arm), flush=True)
            wait_quiet(root, "%s r%d" % (arm, k + 1))
            runs[arm].append(run_arm(root, binary, os.path.join(
                out, "%s-%d" % (arm.replace(":", "-"), k)), arm))
            print("%s:" % NAME, arm, json.dumps(runs[arm][-1]), flush=True)
    json.dump(runs, open(os.path.join(out, "results.json"), "w"), indent=2)
    if sorted(ARMS) != sorted(ALL_ARMS):
        print("%s: BENCH_ARMS is not every arm: BENCHMARKS.md is left as it is" % NAME)
        return
    report(runs, output, started, load_before, os.environ["QUIET_LOG"])


if __name__ == "__main__":
    main(sys.argv)
