"""Python scripts as workers of a Cohort job (`cohort run SCRIPT.py`, a job file's `program:`):
their progress reaches the console, `cohort status`, metrics.jsonl and summary.json through
cohort.report(); the job file's faults fire at the steps they report; a killed worker fails the
job naming it; a hung one leaves a hang report that says where each rank stands; `cohort
diagnose` splits their steps and names a slow rank; a script that never imports cohort still
runs as a job.

    job_test.py COHORT_BINARY  (PYTHONPATH: the package in the build tree)
"""
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

COHORT = sys.argv[1]

# Allreduces and reports `steps` steps; every rank waits at step 5 until the file GATE exists.
WORKER = r'''
import os, sys, time
import torch
import torch.distributed as dist
import cohort
gate, steps = sys.argv[1], int(sys.argv[2])
dist.init_process_group("cohort")
t = torch.ones(1000)
for step in range(1, steps + 1):
    dist.all_reduce(t)
    t /= dist.get_world_size()
    cohort.report(step, loss=1.0 / step, samples=32, total_steps=steps, epoch=0, epochs=1)
    if step == 5:
        while not os.path.exists(gate):
            time.sleep(0.02)
dist.all_reduce(t)
cohort.report(steps, test_accuracy=0.5)
dist.destroy_process_group()
'''

# torch's DDP on a small model, reporting every step.
DDP_WORKER = r'''
import sys
import torch
import torch.distributed as dist
import cohort
steps, where = int(sys.argv[1]), sys.argv[2]
torch.manual_seed(0)
torch.set_num_threads(1)
dist.init_process_group("cohort")
group = dist.new_group(backend="cohort") if where == "subgroup" else None
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(
    torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)), process_group=group)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
for step in range(1, steps + 1):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    cohort.report(step, loss=loss.item(), samples=64, total_steps=steps)
dist.destroy_process_group()
'''

PLAIN = r'''
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(4)
dist.all_reduce(t)
assert t[0].item() == dist.get_world_size()
print("plain gloo done", flush=True)
'''


def fail(msg):
    print(f"job_test: {msg}", file=sys.stderr)
    sys.exit(1)


def until(what, check, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.05)
    fail(f"timed out waiting for {what}")


def get(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def progress_reaches_console_status_and_summary(tmp, script):
    gate = os.path.join(tmp, "gate")
    run = os.path.join(tmp, "run")
    job = subprocess.Popen(
        [COHORT, "run", "--workers", "2", "--set", "dashboard.enabled=true",
         "--set", "dashboard.port=0", "--run-dir", run, script, gate, "20"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url_file = os.path.join(run, "console.url")
        url = until("console.url",
                    lambda: os.path.exists(url_file) and open(url_file).read().strip().rstrip("/"))

        def both_at_step_5():
            rows = get(url + "/api/workers")
            ok = len(rows) == 2 and all(r.get("state") == "training" and r.get("step") == 5
                                        for r in rows)
            return rows if ok else None
        rows = until("both workers training at step 5", both_at_step_5)
        if any(r.get("pid", 0) <= 0 or not r.get("last_heartbeat") for r in rows):
            fail(f"worker rows without pid or heartbeat: {rows}")
        j = until("the job at step 5", lambda: (lambda j: j if j.get("step") == 5 else None)(
            get(url + "/api/job")))
        if j["total_steps"] != 20 or j["state"] != "running" or abs(j["loss"] - 0.2) > 1e-9:
            fail(f"/api/job: {j}")
        status = subprocess.run([COHORT, "status", url], capture_output=True, text=True,
                                timeout=30)
        if status.returncode != 0 or "training" not in status.stdout:
            fail(f"cohort status: {status.stdout}{status.stderr}")
        open(gate, "w").close()
        out, _ = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
    if job.returncode != 0:
        fail(f"cohort run exited {job.returncode}:\n{out}")
    if "completed: 2 workers" not in out or "test accuracy     0.5000" not in out:
        fail(f"the report:\n{out}")
    summary = json.load(open(os.path.join(run, "summary.json")))
    if summary["status"] != "completed" or len(summary["per_rank"]) != 2:
        fail(f"summary: {summary}")
    if summary["steps"] != 20 or summary["samples"] != 2 * 20 * 32 or summary["test_accuracy"] != 0.5:
        fail(f"summary: {summary}")
    metrics = read_jsonl(os.path.join(run, "metrics.jsonl"))
    if [m["step"] for m in metrics] != list(range(1, 21)) + [20]:
        fail(f"metrics steps: {[m['step'] for m in metrics]}")
    last = metrics[-1]
    if last["test_accuracy"] != 0.5 or abs(last["loss"] - 0.05) > 1e-9 or last["world_size"] != 2:
        fail(f"last record: {last}")
    if not all(m.get("samples_per_sec", 0) > 0 for m in metrics[1:]):
        fail(f"records without a rate: {metrics}")
    for r in (0, 1):
        log = open(os.path.join(run, "logs", f"rank-{r}.log")).read()
        if f"joined job 'job_worker' as rank {r} of 2" not in log:
            fail(f"rank {r}'s log: {log}")
    # Each step after the first is a record of the step log; every step waited on its allreduce.
    d = diagnose(run)
    if [b["steps"] for b in d["ranks"]] != [19, 19]:
        fail(f"diagnosis: {d['ranks']}")
    if not all(b["wait_s"] + b["comm_s"] > 0 and b["compute_s"] > 0 for b in d["ranks"]):
        fail(f"steps not split into computing and being blocked: {d['ranks']}")
    print("job_test: progress reaches the console, cohort status, metrics, the summary and "
          "cohort diagnose")


def diagnose(run, *extra):
    r = subprocess.run([COHORT, "diagnose", run, "--json", *extra], capture_output=True,
                       text=True, timeout=60)
    if r.returncode != 0:
        fail(f"cohort diagnose {run}: {r.stdout}{r.stderr}")
    return json.loads(r.stdout)


def diagnose_names_a_slow_rank_of_a_ddp_script(tmp, where):
    """DDP over the default group, or over a new_group of the same ranks (time blocked on any
    group counts)."""
    script = os.path.join(tmp, "ddp_worker.py")
    open(script, "w").write(DDP_WORKER)
    path = os.path.join(tmp, f"slow-{where}.yaml")
    with open(path, "w") as f:
        f.write(f"name: slow\nworkers: 2\nprogram:\n  python: {script}\n  args: [40, {where}]\n"
                "faults:\n  - {kind: slow, rank: 1, at_step: 0, seconds: 0.05}\n")
    run = os.path.join(tmp, f"slow-{where}-run")
    r = subprocess.run([COHORT, "run", path, "--run-dir", run], capture_output=True, text=True,
                       timeout=120)
    if r.returncode != 0:
        fail(f"the DDP job: {r.stdout}{r.stderr}")
    d = diagnose(run)
    ranks = {b["rank"]: b for b in d["ranks"]}
    if sorted(ranks) != [0, 1] or any(b["steps"] != 39 for b in ranks.values()):
        fail(f"diagnosis: {d['ranks']}")
    # Rank 1 sleeps 50 ms after each step: it computes longer, and rank 0 spends most of each
    # step blocked in DDP's gradient exchange, waiting for rank 1's gradients.
    if [s["rank"] for s in d["stragglers"]] != [1]:
        fail(f"stragglers: {d['stragglers']}")
    if ranks[1]["compute_s"] < 0.05 or ranks[0]["wait_s"] < 0.5 * ranks[0]["step_s"]:
        fail(f"the split: {d['ranks']}")
    text = subprocess.run([COHORT, "diagnose", run], capture_output=True, text=True,
                          timeout=60).stdout
    for want in ("rank 1 is a straggler", "torch.set_num_threads", "a Python program"):
        if want not in text:
            fail(f"cohort diagnose without '{want}':\n{text}")
    print(f"job_test: cohort diagnose on a DDP script ({where} group) names the slow rank 1")


def job_file(tmp, name, script, extra):
    path = os.path.join(tmp, f"{name}.yaml")
    with open(path, "w") as f:
        f.write(f"name: {name}\nworkers: 2\nprogram:\n  python: {script}\n"
                f"  args: [{tmp}, 50]\n{extra}")
    return path


def a_fault_kills_a_worker_and_the_job_names_it(tmp, script):
    path = job_file(tmp, "kill", script, "faults:\n  - {kind: kill, rank: 1, at_step: 10}\n")
    run = os.path.join(tmp, "kill-run")
    r = subprocess.run([COHORT, "run", path, "--run-dir", run], capture_output=True, text=True,
                       timeout=120)
    out = r.stdout + r.stderr
    if r.returncode == 0:
        fail(f"a killed worker did not fail the job:\n{out}")
    if "lost rank 1 (host" not in out or "killed by signal 9 (SIGKILL)" not in out:
        fail(f"the loss is not named:\n{out}")
    lost = [e for e in read_jsonl(os.path.join(run, "events.jsonl")) if e["event"] == "worker_lost"]
    if not lost or lost[0]["rank"] != 1:
        fail(f"events: {lost}")
    if "injecting fault: kill after 10 steps" not in open(os.path.join(run, "logs/rank-1.log")).read():
        fail("rank 1's log does not say the fault fired")
    if json.load(open(os.path.join(run, "summary.json")))["status"] != "failed":
        fail("summary of the failed job")
    print("job_test: a fault kills rank 1 at step 10; the job fails naming it")


def a_hung_worker_leaves_a_hang_report(tmp, script):
    path = job_file(tmp, "hang", script, "faults:\n  - {kind: hang, rank: 1, at_step: 10}\n"
                    "comm: {timeout_s: 2}\n")
    run = os.path.join(tmp, "hang-run")
    r = subprocess.run([COHORT, "run", path, "--run-dir", run], capture_output=True, text=True,
                       timeout=120)
    out = r.stdout + r.stderr
    if r.returncode == 0 or "a collective timed out" not in out:
        fail(f"the hang:\n{out}")
    report = open(os.path.join(run, "hang-report.txt")).read()
    for want in ("rank 1 never entered allreduce #11", "in training of step 11",
                 "rank 0 flight recorder"):
        if want not in report:
            fail(f"hang report without '{want}':\n{report}")
    print("job_test: a hung rank 1 is named in the hang report")


def a_script_without_cohort_runs_as_a_job(tmp):
    script = os.path.join(tmp, "plain.py")
    open(script, "w").write(PLAIN)
    run = os.path.join(tmp, "plain-run")
    r = subprocess.run([COHORT, "run", "--workers", "2", "--run-dir", run, script],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        fail(f"a gloo script under cohort run: {r.stdout}{r.stderr}")
    summary = json.load(open(os.path.join(run, "summary.json")))
    if summary["status"] != "completed" or summary["exits"] != {"0": "exited with code 0",
                                                                 "1": "exited with code 0"}:
        fail(f"summary: {summary}")
    if "plain gloo done" not in open(os.path.join(run, "logs/rank-0.log")).read():
        fail("rank 0's log")
    print("job_test: a script that does not import cohort runs as a job")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "job_worker.py")
        open(script, "w").write(WORKER)
        progress_reaches_console_status_and_summary(tmp, script)
        a_fault_kills_a_worker_and_the_job_names_it(tmp, script)
        a_hung_worker_leaves_a_hang_report(tmp, script)
        diagnose_names_a_slow_rank_of_a_ddp_script(tmp, "default")
        diagnose_names_a_slow_rank_of_a_ddp_script(tmp, "subgroup")
        a_script_without_cohort_runs_as_a_job(tmp)


if __name__ == "__main__":
    main()
