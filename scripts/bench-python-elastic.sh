#!/usr/bin/env bash
# Recovery of an elastic Python job: the same script (bench/python_elastic.py: an MLP on
# Fashion-MNIST, 3 workers, one thread each, batch 32, a commit every 10 steps) under `cohort run`
# with cohort.elastic (in-memory commits; survivors go on, a replacement joins) and under
# TorchElastic (`torchrun --max_restarts 1`, Gloo; rank 0 saves the same state to disk at every
# commit; torchrun restarts every worker), with the same kill: job rank 1 SIGKILLs itself after
# step 65 on the first attempt. From the workers' step logs, for both the same way:
#   - seconds from the victim's last step to the next step any worker completes,
#   - seconds from it to the first step at the full world size (3) again,
#   - steps lost: the victim's last step minus the step training resumed from.
# BENCH_ROUNDS runs of each (interleaved; medians and ranges). Writes the python-elastic section of
# BENCHMARKS.md (between its markers).
#
#   scripts/bench-python-elastic.sh        # or: make bench-python-elastic (also run by bench-python)
#
# Environment: BENCH_ROUNDS (3), BENCH_BUILD_DIR (build/release), BENCH_OUTPUT (BENCHMARKS.md),
# BENCH_MONITOR_INTERVAL (1: torchrun's --monitor_interval; its default is 5 s).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BENCH_BUILD_DIR:-$ROOT/build/release}
OUTPUT=${BENCH_OUTPUT:-$ROOT/BENCHMARKS.md}
OUT=$BUILD/bench-python-elastic
rm -rf "$OUT"
mkdir -p "$OUT"
export QUIET_LOG=$OUT/load.tsv
: >"$QUIET_LOG"
if [[ ! -f $BUILD/python/cohort/__init__.py ]]; then
  echo "bench-python-elastic: no Python package in $BUILD/python (make build first)" >&2
  exit 1
fi
export PYTHONPATH=$BUILD/python OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

exec /usr/bin/python3 - "$ROOT" "$BUILD/cohort" "$OUT" "$OUTPUT" <<'PY'
import json, os, socket, statistics, subprocess, sys, time

root, cohort, out, output = sys.argv[1:5]
sys.path.insert(0, os.path.join(root, "scripts", "lib"))
from quiet_report import busy_labels, load_note
from report_text import write_section
rounds = int(os.environ.get("BENCH_ROUNDS", "3"))
monitor = os.environ.get("BENCH_MONITOR_INTERVAL", "1")
KILL, COMMIT, WORLD = 65, 10, 3
script = os.path.join(root, "bench", "python_elastic.py")
load_before = os.getloadavg()
started = time.time()


def wait_quiet(label):
    subprocess.run(["bash", "-c", 'source "$1" && wait_quiet "$2"', "wait_quiet",
                    os.path.join(root, "scripts", "lib", "quiet.sh"), label], check=True)


def measure(run_dir):
    rows = []
    for name in os.listdir(run_dir):
        if name.startswith("steps-"):
            rows += [json.loads(l) for l in open(os.path.join(run_dir, name)) if l.strip()]
    kill = [r["time"] for r in rows if r["attempt"] == 0 and r["rank"] == 1 and r["step"] == KILL]
    if len(kill) != 1:
        raise SystemExit(f"bench-python-elastic: no kill at step {KILL} in {run_dir}")
    after = [r for r in rows if r["attempt"] > 0 and r["time"] > kill[0]]
    full = [r["time"] for r in after if r["world"] == WORLD]
    return {"next_step_s": min(r["time"] for r in after) - kill[0],
            "full_world_s": (min(full) - kill[0]) if full else None,
            "steps_lost": KILL - (min(r["step"] for r in after) - 1)}


def run(label, argv, run_dir):
    os.makedirs(run_dir)
    wait_quiet(label)
    with open(os.path.join(run_dir, "launcher.log"), "w") as log:
        rc = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, timeout=600).returncode
    if rc != 0:
        raise SystemExit(f"bench-python-elastic: {label} failed ({rc}); see {run_dir}")
    m = measure(run_dir)
    print(f"bench-python-elastic: {label}: {json.dumps(m)}", flush=True)
    return m


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


results = {"torchelastic": [], "cohort": []}
args = ["--kill-step", str(KILL), "--commit-every", str(COMMIT), "--samples", "60000"]
for i in range(1, rounds + 1):
    d = os.path.join(out, f"torchelastic-{i}")
    results["torchelastic"].append(run(f"torchelastic r{i}", [
        "/usr/bin/python3", "-m", "torch.distributed.run", "--nnodes", "1", "--rdzv_backend", "c10d",
        "--rdzv_endpoint", f"127.0.0.1:{free_port()}", "--nproc_per_node", str(WORLD),
        "--max_restarts", "1", "--monitor_interval", monitor, "--redirects", "1", "--tee", "1",
        script, "--run-dir", d] + args, d))
    d = os.path.join(out, f"cohort-{i}")
    job = os.path.join(out, f"cohort-{i}.yaml")
    with open(job, "w") as f:
        f.write(f"name: python-elastic\nworkers: {WORLD}\nthreads_per_worker: 1\n"
                f"program:\n  python: {script}\n  args: {json.dumps(['--run-dir', d] + args)}\n"
                "elastic: {min_workers: 2, max_restarts: 1}\n")
    results["cohort"].append(run(f"cohort r{i}", [cohort, "run", job, "--run-dir", d], d))
json.dump(results, open(os.path.join(out, "results.json"), "w"), indent=2)

busy = busy_labels(os.environ["QUIET_LOG"])


def stat(name, key):
    v = [r[key] for r in results[name] if r[key] is not None]
    return statistics.median(v), min(v), max(v)


def cell(name, key, fmt="%.2f"):
    med, lo, hi = stat(name, key)
    return (fmt % med) + " (" + (fmt % lo) + "–" + (fmt % hi) + ")"


def ratio(key):
    r = stat("torchelastic", key)[0] / stat("cohort", key)[0]
    return ("**%.1f×**" % r) if not busy else ("%.1f× (busy)" % r)


cpu = subprocess.run("lscpu | sed -n 's/^Model name: *//p'", shell=True, capture_output=True,
                     text=True).stdout.strip()
BEGIN, END = "<!-- python-elastic:begin -->", "<!-- python-elastic:end -->"
lines = [
    BEGIN, "## Recovery of an elastic Python job: cohort.elastic vs TorchElastic", "",
    "Command: `scripts/bench-python-elastic.sh` (`make bench-python-elastic`; `make bench-python` "
    "runs it too). Machine: %d CPUs (%s), Linux %s. Run %s, %.0f s, load average before %.1f, "
    "after %.1f; %d runs of each, interleaved."
    % (os.cpu_count(), cpu, os.uname().release, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
       time.time() - started, load_before[0], os.getloadavg()[0], rounds), "",
    load_note(os.environ["QUIET_LOG"]), "",
    "One script for both, `bench/python_elastic.py`: an MLP (784-256-10) on all 60,000 "
    "Fashion-MNIST images, %d workers, one thread each, batch 32 per worker, SGD with momentum, "
    "`cohort.elastic.State` and `DistributedSampler`, a commit every %d steps; job rank 1 SIGKILLs "
    "itself after step %d on the first attempt. Cohort: `cohort run` with `elastic: {min_workers: 2, "
    "max_restarts: 1}`; the commit is in memory, the two survivors go on from it at 2 workers in the "
    "same processes, and the replacement the launcher starts joins at a later commit. TorchElastic: "
    "Debian's python3-torch 1.13, `torchrun --nproc_per_node %d --max_restarts 1 "
    "--monitor_interval %s` (its default is 5 s; 1 s favours it), Gloo, rank 0 saving the same "
    "state to disk at every commit and every rank loading it on start; torchrun restarts all %d "
    "workers." % (WORLD, COMMIT, KILL, WORLD, monitor, WORLD), "",
    "Measured the same way for both from the workers' step logs (one clock): *to the next step* = "
    "from the victim's last completed step to the next step any worker completes; *to full size* "
    "= to the first step completed by %d workers again; *steps lost* = step %d minus the step "
    "training resumed from. Medians, ranges in brackets." % (WORLD, KILL), "",
    "| | to the next step, s | to full size (%d workers), s | steps lost |" % WORLD,
    "|---|---|---|---|",
    "| TorchElastic | %s | %s | %s |" % (cell("torchelastic", "next_step_s"),
                                        cell("torchelastic", "full_world_s"),
                                        cell("torchelastic", "steps_lost", "%d")),
    "| cohort.elastic | %s | %s | %s |" % (cell("cohort", "next_step_s"),
                                          cell("cohort", "full_world_s"),
                                          cell("cohort", "steps_lost", "%d")),
    "| **TorchElastic / Cohort** | %s | %s | |" % (ratio("next_step_s"), ratio("full_world_s")),
    "",
    "Target: ≥ 5× faster to the next step. Back at full size Cohort's time is the replacement's "
    "start (a new Python process importing torch and loading the data) plus the wait for the "
    "members' next commit; TorchElastic's is the restart of every worker, which also re-reads "
    "the checkpoint. Steps lost are the same for both at the same commit interval (the kill lands "
    "5 steps after a commit).",
    END]
write_section(output, BEGIN, END, lines)
print("bench-python-elastic: wrote", output)
PY
