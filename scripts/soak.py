#!/usr/bin/python3
"""The soak drill (make soak): a 4-worker job on the emulated cluster for SOAK_MINUTES (10) with a
random fault every 20-40 s, then checks that nothing was lost and nothing is left behind.

    scripts/soak.py COHORT OUT [--report BENCHMARKS.md]

The cluster (scripts/netcluster.sh, links at 1 Gbit/s): the launcher on node c with
--external-workers, so that this driver plays the cluster manager that starts workers and
replaces the ones that end; host w0 runs job ranks 0 and 1 (shared memory between them), hosts
w1 and w2 one worker each. The job: the MLP on Fashion-MNIST, elastic (min 2, max 4 workers),
snapshots every 20 steps, checkpoints every 100; its length in epochs is chosen from a fault-free
calibration run so that it lasts about SOAK_MINUTES with its faults.

Faults, one every 20-40 s, cycling through the kinds in a random order:
  kill      SIGKILL of a worker; a replacement is started on its host
  stop      SIGSTOP of a worker for 1-6 s, then SIGCONT (past failure_timeout_s it is declared
            lost: it finds itself excluded when it wakes and exits, and is replaced)
  slow      a worker throttled for 10 s: stopped and continued every 60 ms (half speed)
  cut       the link of w1 or w2 down for 4-8 s (its worker is cut off from everybody; it fences
            itself and exits, and is replaced once the link is back)
  corrupt   a byte of the newest checkpoint flipped, then the launcher SIGKILLed: the workers fence
            themselves, and `cohort run --resume` must restart the job from the newest
            checkpoint that verifies, skipping the corrupted one
  flood     the coordinator's port flooded for 10 s with garbage, oversized frame headers, wrong
            tokens and idle connections (200 at a time)

Afterwards: the job completed; every sample of every epoch was trained on exactly once (the
committed counts: samples, sum and sum of squares of their indices); every checkpoint verifies
(`cohort checkpoint verify`); no process of the job, no listening port in the cluster, no network
namespace and no shared-memory segment of the job is left. The report lists the faults survived
and the time each one cost: the wall time until the next fault minus the steps the job gained in
it at the calibrated fault-free step time.
"""
import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NC = os.path.join(ROOT, "scripts", "netcluster.sh")
sys.path.insert(0, os.path.join(ROOT, "scripts", "lib"))
from report_text import write_section  # noqa: E402
from run_files import jsonl  # noqa: E402

MINUTES = float(os.environ.get("SOAK_MINUTES", "10"))
SEED = int(os.environ.get("SOAK_SEED", str(int(time.time()))))
KINDS = ["kill", "stop", "slow", "cut", "corrupt", "flood"]
HOSTS = {0: 0, 1: 0, 2: 1, 3: 2}  # job rank -> cluster node of the first four workers
PORT = 29400
N_TRAIN = 60000
BATCH = 64  # per worker
JOB = [
    "--set", "workers=4", "--set", "threads_per_worker=1", "--set", "train.batch_size=%d" % BATCH,
    "--set", "train.log_every_steps=1", "--set", "train.seed=7",
    "--set", "elastic.min_workers=2", "--set", "elastic.max_workers=4",
    "--set", "elastic.heartbeat_s=0.5", "--set", "elastic.failure_timeout_s=3",
    "--set", "elastic.join_timeout_s=60", "--set", "elastic.snapshot_every_steps=20",
    "--set", "checkpoint.every_steps=100", "--set", "checkpoint.keep=3",
    "--set", "comm.timeout_s=20", "--set", "elastic.max_restarts=1000",
]

FLOOD = r"""
import os, random, socket, struct, sys, time
host, port, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
end = time.time() + seconds
opened = 0
while time.time() < end:
    socks = []
    for i in range(200):
        try:
            s = socket.create_connection((host, port), timeout=1)
        except OSError:
            continue
        opened += 1
        kind = i % 4
        try:
            if kind == 0:
                s.sendall(os.urandom(random.randint(1, 4096)))
            elif kind == 1:  # a frame header that announces a terabyte
                s.sendall(b"CHRT" + struct.pack("<HHQ", 1, 1, 1 << 40))
            elif kind == 2:  # a hello under the wrong token, then its garbage answer
                s.sendall(b"CHRT" + struct.pack("<HHQ", 1, 1, 40) + os.urandom(40))
        except OSError:
            pass
        socks.append(s)  # kind 3 says nothing
    time.sleep(1.0)
    for s in socks:
        s.close()
print(opened)
"""


def log(*parts):
    print("soak: " + " ".join(str(p) for p in parts), flush=True)


class Cluster:
    """Three hosts and a coordinator node, owned by this process (netcluster.sh up)."""

    def __init__(self):
        out = subprocess.run([NC, "up", "3", "--rate", "1gbit", "--owner", str(os.getpid())],
                             check=True, capture_output=True, text=True).stdout
        env = dict(line.split("=", 1) for line in out.split() if "=" in line)
        self.id = env["NETCLUSTER_ID"]
        self.coordinator = env["NETCLUSTER_COORDINATOR"]

    def ns(self, node):
        return "cnc-%s-%s" % (self.id, "c" if node == "c" else "w%d" % node)

    def addr(self, node):
        return subprocess.run([NC, "addr", str(node)], check=True, capture_output=True,
                              text=True).stdout.strip()

    def cmd(self, node, argv):
        return ["ip", "netns", "exec", self.ns(node)] + argv

    def link(self, node, up):
        subprocess.run(self.cmd(node, ["ip", "link", "set", "eth0", "up" if up else "down"]),
                       check=True)

    def down(self):
        subprocess.run([NC, "down", self.id], check=False)

    def namespaces(self):
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        return [l.split()[0] for l in out.splitlines() if l.startswith("cnc-%s-" % self.id)]


class Job:
    """The launcher and the workers this driver starts, replaces and stops."""

    def __init__(self, cohort, cluster, out, epochs, extra=()):
        self.cohort, self.cluster, self.out, self.epochs = cohort, cluster, out, epochs
        self.extra = list(extra)  # more --set options for the job
        self.run_dir = os.path.join(out, "run")
        self.token = os.path.join(out, "token")
        self.logs = os.path.join(out, "logs")
        os.makedirs(self.logs, exist_ok=True)
        self.lock = threading.Lock()
        self.workers = {}  # rank -> (Popen, node)
        self.cut = set()  # nodes whose link is down
        self.next_rank = 4
        self.restarting = False
        self.launcher = None
        self.launches = 0
        self.exits = []  # (time, rank, node, returncode)
        self.faults = []  # {kind, start, what}

    def start_launcher(self, resume):
        self.launches += 1
        args = ([self.cohort, "run", "--resume", self.run_dir] if resume else
                [self.cohort, "run", os.path.join(ROOT, "examples", "fashion-mlp.yaml"),
                 "--run-dir", self.run_dir, "--set", "train.epochs=%d" % self.epochs] + JOB +
                self.extra)
        args += ["--external-workers", "--bind", self.cluster.coordinator, "--port", str(PORT),
                 "--token-file", self.token]
        out = open(os.path.join(self.logs, "launcher-%d.log" % self.launches), "w")
        self.launcher = subprocess.Popen(self.cluster.cmd("c", args), stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 30
        while not os.path.exists(self.token) and time.time() < deadline:
            time.sleep(0.05)

    def start_worker(self, rank, node):
        out = open(os.path.join(self.logs, "rank-%d.log" % rank), "a")
        argv = [self.cohort, "worker", "--join", "%s:%d" % (self.cluster.coordinator, PORT),
                "--rank", str(rank), "--bind", self.cluster.addr(node), "--token-file",
                self.token]
        p = subprocess.Popen(self.cluster.cmd(node, argv), stdout=out, stderr=subprocess.STDOUT,
                             start_new_session=True,
                             env=dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1"))
        self.workers[rank] = (p, node)

    def start_all(self):
        for rank, node in HOSTS.items():
            self.start_worker(rank, node)

    def live(self):
        with self.lock:
            return [(r, p, n) for r, (p, n) in self.workers.items() if p.poll() is None]

    def supervise(self):
        """Replaces workers that failed or were excluded (on the same host, once its link is up),
        unless the whole job is being restarted. A worker that exits 0 finished the job."""
        with self.lock:
            if self.restarting:
                return
            for rank, (p, node) in list(self.workers.items()):
                rc = p.poll()
                if rc is None or rc == 0 or node in self.cut:
                    continue
                self.exits.append((time.time(), rank, node, rc))
                del self.workers[rank]
                log("worker rank %d on w%d exited (%d); replacement rank %d"
                    % (rank, node, rc, self.next_rank))
                self.start_worker(self.next_rank, node)
                self.next_rank += 1

    def stop_everything(self):
        procs = [p for p, _ in self.workers.values()] + ([self.launcher] if self.launcher else [])
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in procs:
            p.wait()


def fault_kill(job, rng):
    rank, p, node = rng.choice(job.live())
    os.kill(p.pid, signal.SIGKILL)
    return "SIGKILL rank %d (w%d)" % (rank, node)


def fault_stop(job, rng):
    rank, p, node = rng.choice(job.live())
    seconds = rng.uniform(1, 6)
    os.kill(p.pid, signal.SIGSTOP)
    time.sleep(seconds)
    os.kill(p.pid, signal.SIGCONT)
    return "SIGSTOP rank %d (w%d) for %.1f s" % (rank, node, seconds)


def fault_slow(job, rng):
    rank, p, node = rng.choice(job.live())
    end = time.time() + 10
    while time.time() < end and p.poll() is None:
        os.kill(p.pid, signal.SIGSTOP)
        time.sleep(0.06)
        os.kill(p.pid, signal.SIGCONT)
        time.sleep(0.06)
    return "rank %d (w%d) at half speed for 10 s" % (rank, node)


def fault_cut(job, rng):
    node = rng.choice([1, 2])
    seconds = rng.uniform(4, 8)
    with job.lock:
        job.cut.add(node)
    job.cluster.link(node, False)
    time.sleep(seconds)
    job.cluster.link(node, True)
    with job.lock:
        job.cut.discard(node)
    return "link of w%d down for %.1f s" % (node, seconds)


def fault_corrupt(job, rng):
    ckpts = sorted(f for f in os.listdir(os.path.join(job.run_dir, "checkpoints"))
                   if f.startswith("ckpt-") and f.endswith(".cohort"))
    if not ckpts:
        return None
    path = os.path.join(job.run_dir, "checkpoints", ckpts[-1])
    size = os.path.getsize(path)
    at = rng.randrange(size // 4, size)
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x5A]))
    with job.lock:
        job.restarting = True
    os.killpg(job.launcher.pid, signal.SIGKILL)
    job.launcher.wait()
    # The workers lose their coordinator and fence themselves.
    deadline = time.time() + 30
    while time.time() < deadline and job.live():
        time.sleep(0.1)
    leftover = [r for r, _, _ in job.live()]
    with job.lock:
        for rank, (p, node) in list(job.workers.items()):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            job.exits.append((time.time(), rank, node, p.returncode))
        job.workers.clear()
        job.start_launcher(resume=True)
        job.start_all()
        job.restarting = False
    return ("byte %d of %s flipped, launcher SIGKILLed, job resumed from disk%s"
            % (at, ckpts[-1], "" if not leftover else
               " (ranks %s had not exited 30 s after it)" % leftover))


def fault_flood(job, rng):
    r = subprocess.run(job.cluster.cmd(2, ["/usr/bin/python3", "-c", FLOOD,
                                           job.cluster.coordinator, str(PORT), "10"]),
                       capture_output=True, text=True, timeout=60)
    return "coordinator port flooded for 10 s (%s connections)" % r.stdout.strip()


FAULTS = {"kill": fault_kill, "stop": fault_stop, "slow": fault_slow, "cut": fault_cut,
          "corrupt": fault_corrupt, "flood": fault_flood}


def calibrate(cohort, cluster, out):
    """A fault-free run of the job's first 120 steps: the step time with 4 workers here."""
    job = Job(cohort, cluster, os.path.join(out, "calibration"), 1,
              extra=["--set", "train.max_steps=120"])
    job.start_launcher(resume=False)
    job.start_all()
    if job.launcher.wait(600) != 0:
        raise SystemExit("soak: the calibration run failed; see %s" % job.logs)
    for p, _ in job.workers.values():
        p.wait(60)
    steps = [(m["step"], m["time"]) for m in jsonl(os.path.join(job.run_dir, "metrics.jsonl"))]
    steps = [s for s in steps if s[0] > 20]  # after start-up
    return (steps[-1][1] - steps[0][1]) / (steps[-1][0] - steps[0][0])


def check(job, cohort, cluster):
    """What must hold after the soak; returns (name, ok, detail) rows."""
    rows = []
    summary = json.load(open(os.path.join(job.run_dir, "summary.json")))
    rows.append(("the job completed", summary.get("status") == "completed",
                 "status %s, %s steps, test accuracy %s" % (
                     summary.get("status"), summary.get("steps"),
                     summary.get("test_accuracy"))))
    n = N_TRAIN
    want = (n, n * (n - 1) / 2, (n - 1) * n * (2 * n - 1) / 6)
    bad = []
    for r in summary.get("per_rank", []):
        counts = r.get("epoch_samples", [])
        if len(counts) != job.epochs:
            bad.append("rank %s has %d epochs" % (r.get("rank"), len(counts)))
        for e in counts:
            got = (e["samples"], e["id_sum"], e["id_sq_sum"])
            if got != want:
                bad.append("epoch %d on rank %s: %s" % (e["epoch"], r.get("rank"), got))
    rows.append(("every sample of every epoch trained on exactly once", not bad and
                 bool(summary.get("per_rank")),
                 "; ".join(bad[:3]) or "%d epochs x %d samples: count, sum and sum of squares "
                 "of the indices as for one pass" % (job.epochs, n)))
    v = subprocess.run([cohort, "checkpoint", "verify",
                        os.path.join(job.run_dir, "checkpoints")],
                       capture_output=True, text=True)
    rows.append(("every checkpoint verifies", v.returncode == 0,
                 v.stdout.strip().splitlines()[-1] if v.stdout.strip() else v.stderr.strip()))
    resumed = [e for e in jsonl(os.path.join(job.run_dir, "events.jsonl"))
               if e.get("event") == "resumed_from_checkpoint"]
    corrupted = sum(1 for f in job.faults if f["kind"] == "corrupt" and f["what"])
    skipped = sum(1 for e in resumed if e.get("skipped"))
    rows.append(("each resume skipped the corrupted checkpoint", skipped == corrupted,
                 "%d resumes, %d skipped a corrupt checkpoint, %d corrupted" % (
                     len(resumed), skipped, corrupted)))
    left = subprocess.run(["pgrep", "-af", job.run_dir + "|" + job.token],
                          capture_output=True, text=True).stdout.strip()
    rows.append(("no process of the job left", not left, left or "none"))
    listening = []
    for node in ["c", 0, 1, 2]:
        out = subprocess.run(cluster.cmd(node, ["ss", "-Hltn"]), capture_output=True,
                             text=True).stdout.strip()
        if out:
            listening.append("%s: %s" % (node, out.replace("\n", "; ")))
    rows.append(("no listening port left in the cluster", not listening,
                 "; ".join(listening) or "none"))
    return rows


def lost_per_fault(job, step_s, end):
    """For each fault: wall time until the next fault (or the end) minus what the job gained in
    it at the fault-free step time (negative where the job ran faster than with its 4 workers:
    on 2 CPUs three workers are less oversubscribed than four); the longest time without a
    completed step; the steps it rolled back in that window."""
    steps = sorted((m["time"], m["step"]) for m in jsonl(os.path.join(job.run_dir,
                                                                      "metrics.jsonl")))
    events = jsonl(os.path.join(job.run_dir, "events.jsonl"))

    def step_at(t):
        done = [s for tt, s in steps if tt <= t]
        return done[-1] if done else 0

    out = []
    for i, f in enumerate(job.faults):
        t0 = f["start"]
        t1 = job.faults[i + 1]["start"] if i + 1 < len(job.faults) else end
        gained = step_at(t1) - step_at(t0)
        times = [t0] + [tt for tt, _ in steps if t0 < tt < t1] + [t1]
        stall = max(b - a for a, b in zip(times, times[1:]))
        rolled = sum(e.get("steps_rolled_back", 0)
                     for e in events if e.get("event") == "rolled_back" and t0 <= e["time"] < t1)
        changes = sum(1 for e in events
                      if e.get("event") == "membership_changed" and t0 <= e["time"] < t1)
        out.append(dict(f, lost_s=(t1 - t0) - gained * step_s, stall_s=stall,
                        rolled_back=rolled, membership_changes=changes, window_s=t1 - t0))
    return out


def report(path, job, rows, faults, step_s, wall, started, shm_left, ns_left):
    by_kind = {}
    for f in faults:
        by_kind.setdefault(f["kind"], []).append(f["lost_s"])
    ok = all(r[1] for r in rows) and not shm_left and not ns_left
    lines = ["<!-- soak:begin -->", "## Soak drill: a 4-worker job under a fault every 20–40 s",
             "",
             "Command: `make soak` (`scripts/soak.py`, SOAK_MINUTES=%g, SOAK_SEED=%d). Machine: %d "
             "CPUs, Linux %s. Run %s; the job ran %.0f s (%d epochs of the MLP on Fashion-MNIST, "
             "4 workers on 3 hosts of the emulated cluster at 1 Gbit/s, elastic 2–4 workers, "
             "snapshots every 20 steps, checkpoints every 100). Fault-free step time, measured "
             "first in the same cluster: %.1f ms." % (
                 MINUTES, SEED, os.cpu_count(), os.uname().release,
                 time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)), wall, job.epochs,
                 step_s * 1e3), "",
             "| check | result | |", "|---|:-:|---|"]
    for name, good, detail in rows:
        lines.append("| %s | %s | %s |" % (name, "yes" if good else "**no**", detail))
    lines.append("| no network namespace of the cluster left | %s | %s |" % (
        "yes" if not ns_left else "**no**", ", ".join(ns_left) or "none"))
    lines.append("| no shared-memory segment of the job left | %s | %s |" % (
        "yes" if not shm_left else "**no**", ", ".join(shm_left) or "none"))
    stalls = {}
    for f in faults:
        stalls.setdefault(f["kind"], []).append(f["stall_s"])
    lines += ["", "Faults survived, and what each cost. *Longest stall*: the longest time without a "
              "completed step from the fault to the next one. *Time lost*: the wall time from the "
              "fault to the next one minus the steps the job gained in it at the fault-free step "
              "time (a rollback counts against the steps gained). It can be negative: these 4 "
              "workers share 2 CPUs, so a job that lost one runs its steps faster until the "
              "replacement joins.", "",
              "| kind | faults | longest stall, s: median (min–max) "
              "| time lost, s: median (min–max) |", "|---|---:|---|---|"]
    span = lambda v: "%.1f (%.1f–%.1f)" % (statistics.median(v), min(v), max(v))
    for kind in KINDS:
        if kind in by_kind:
            lines.append("| %s | %d | %s | %s |" % (kind, len(by_kind[kind]), span(stalls[kind]),
                                                    span(by_kind[kind])))
    lines += ["", "Every fault, in order:", "",
              "| t, s | fault | membership changes | steps rolled back | longest stall, s "
              "| time lost, s |", "|---:|---|---:|---:|---:|---:|"]
    for f in faults:
        lines.append("| %.0f | %s: %s | %d | %d | %.1f | %.1f |" % (
            f["start"] - started, f["kind"], f["what"], f["membership_changes"],
            f["rolled_back"], f["stall_s"], f["lost_s"]))
    lines += ["", "All checks passed." if ok else "**Some checks failed.**", "<!-- soak:end -->"]
    write_section(path, "<!-- soak:begin -->", "<!-- soak:end -->", lines)
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cohort")
    ap.add_argument("out")
    ap.add_argument("--report")
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("soak: needs root (network namespaces)")
    os.makedirs(a.out, exist_ok=True)
    rng = random.Random(SEED)
    cluster = Cluster()
    job = None
    try:
        log("cluster %s; calibrating the fault-free step time" % cluster.id)
        step_s = calibrate(a.cohort, cluster, a.out)
        steps_per_epoch = -(-N_TRAIN // (4 * BATCH))
        epochs = max(2, round(MINUTES * 60 * 0.8 / step_s / steps_per_epoch))
        log("%.1f ms per step: %d epochs" % (step_s * 1e3, epochs))
        job = Job(a.cohort, cluster, os.path.join(a.out, "soak"), epochs)
        started = time.time()
        job.start_launcher(resume=False)
        job.start_all()
        order, next_fault, running = [], started + rng.uniform(20, 40), None
        while True:
            if job.launcher.poll() is not None and not job.restarting:
                break
            job.supervise()
            if running is None and time.time() >= next_fault:
                if not order:
                    order = rng.sample(KINDS, len(KINDS))
                kind = order.pop()
                entry = {"kind": kind, "start": time.time(), "what": None}
                job.faults.append(entry)

                def run(entry=entry, kind=kind):
                    entry["what"] = FAULTS[kind](job, rng)
                    log("fault %s: %s" % (kind, entry["what"]))

                running = threading.Thread(target=run)
                running.start()
                next_fault = time.time() + rng.uniform(20, 40)
            if running is not None and not running.is_alive():
                running.join()
                running = None
            time.sleep(0.2)
        end = time.time()
        if running is not None:
            running.join()
        rc = job.launcher.returncode
        log("the launcher exited with %d after %.0f s" % (rc, end - started))
        deadline = time.time() + 30
        while job.live() and time.time() < deadline:
            time.sleep(0.2)
        job.faults = [f for f in job.faults if f["what"]]
        rows = check(job, a.cohort, cluster)
        faults = lost_per_fault(job, step_s, end)
    finally:
        if job:
            job.stop_everything()
        cluster.down()
    ns_left = cluster.namespaces()
    shm_left = [f for f in os.listdir("/dev/shm") if f.startswith("cohort-")]
    for name, good, detail in rows:
        log("%s: %s (%s)" % (name, "yes" if good else "NO", detail))
    ok = True
    if a.report:
        ok = report(a.report, job, rows, faults, step_s, end - started, started, shm_left,
                    ns_left)
    else:
        ok = all(r[1] for r in rows) and not shm_left and not ns_left
    json.dump({"faults": faults, "checks": rows, "seed": SEED}, open(
        os.path.join(a.out, "soak.json"), "w"), indent=2)
    log("faults survived: %d; %s" % (len(faults), "all checks passed" if ok else "CHECKS FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
