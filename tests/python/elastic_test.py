"""Elastic training from Python (cohort.elastic) under `cohort run`: 3 workers, rank 1 SIGKILLed
by the job's fault between two commits. The job must finish; the survivors must never restart
(the same pids train in every membership epoch); they roll back to the last commit and go on at 2
workers; a replacement joins at a commit; and over every epoch of training each sample is trained
exactly once, counting for each step the membership epoch that trained it last (steps trained and
then rolled back do not count).

    elastic_test.py COHORT_BINARY  (PYTHONPATH: the package in the build tree)
"""
import collections
import json
import os
import subprocess
import sys
import tempfile
import time

COHORT = sys.argv[1]
SAMPLES, EPOCHS, BATCH, COMMIT_EVERY, KILL_AT = 3000, 2, 16, 10, 25

WORKER = r'''
import json, os, sys, time
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import cohort
samples, epochs, batch, commit_every, record = (int(sys.argv[1]), int(sys.argv[2]),
                                                int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
torch.manual_seed(0)
x, y = torch.randn(samples, 20), torch.randint(0, 4, (samples,))
model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
state = cohort.elastic.State(model=model, optimizer=opt,
                             sampler=cohort.elastic.DistributedSampler(samples, batch, seed=3),
                             epoch=0, step=0)
out = open(record, "a", buffering=1)

@cohort.elastic.run
def train(state):
    ddp = nn.parallel.DistributedDataParallel(state.model)
    rank, world = dist.get_rank(), dist.get_world_size()
    membership = cohort.elastic.membership_epoch()
    for state.epoch in range(state.epoch, epochs):
        state.sampler.set_epoch(state.epoch)
        for b in state.sampler:
            opt.zero_grad()
            F.cross_entropy(ddp(x[b]), y[b]).backward()
            opt.step()
            state.step += 1
            out.write(json.dumps({"epoch": state.epoch, "step": state.step, "rank": rank,
                                  "world": world, "membership": membership,
                                  "pid": os.getpid(), "samples": b,
                                  "env": {k: os.environ[k] for k in (
                                      "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                                      "TORCHELASTIC_RESTART_COUNT")}}) + "\n")
            cohort.report(state.step, samples=len(b))
            if state.step % commit_every == 0:
                # Two workers left: wait at this commit until the replacement asks to join, so
                # that it is admitted before the job ends.
                while world < 3 and not cohort._C._job_change_requested():
                    time.sleep(0.01)
                state.commit()
    state.commit()

train(state)
'''


def fail(msg):
    print(f"elastic_test: {msg}", file=sys.stderr)
    sys.exit(1)


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    with tempfile.TemporaryDirectory() as tmp:
        script, record = os.path.join(tmp, "worker.py"), os.path.join(tmp, "steps.jsonl")
        open(script, "w").write(WORKER)
        job = os.path.join(tmp, "job.yaml")
        open(job, "w").write(
            f"name: elastic\nworkers: 3\n"
            f"program:\n  python: {script}\n"
            f"  args: [{SAMPLES}, {EPOCHS}, {BATCH}, {COMMIT_EVERY}, {record}]\n"
            f"elastic: {{min_workers: 2, max_restarts: 1, failure_timeout_s: 10}}\n"
            f"faults:\n  - {{kind: kill, rank: 1, at_step: {KILL_AT}}}\n")
        run = os.path.join(tmp, "run")
        started = time.monotonic()
        r = subprocess.run([COHORT, "run", job, "--run-dir", run], capture_output=True, text=True,
                           timeout=240)
        out = r.stdout + r.stderr
        if r.returncode != 0:
            fail(f"the job failed ({r.returncode}):\n{out}")
        summary = json.load(open(os.path.join(run, "summary.json")))
        if (summary["status"] != "completed" or summary["recoveries"] != 1 or
                summary["final_world_size"] != 3 or summary["workers_lost"] != 1):
            fail(f"summary: {json.dumps(summary, indent=1)}")
        events = read_jsonl(os.path.join(run, "events.jsonl"))
        started_pids = {e["rank"]: e["pid"] for e in events if e["event"] == "worker_started"}
        memberships = [e["members"] for e in events if e["event"] == "membership_changed"]
        if memberships != [[0, 2], [0, 2, 3]]:
            fail(f"memberships: {memberships}")
        rolled = [e for e in events if e["event"] == "rolled_back"]
        if not rolled or rolled[0]["restored_step"] != KILL_AT - KILL_AT % COMMIT_EVERY:
            fail(f"rolled back: {rolled}")

        steps = read_jsonl(record)
        # The survivors never restarted: ranks 0 and 2 trained in every membership epoch with the
        # pids the launcher started them with; the replacement (rank 3 of the job) only in the last.
        pids = collections.defaultdict(set)
        for s in steps:
            pids[s["membership"]].add(s["pid"])
        for m in (0, 1, 2):
            for rank in (0, 2):
                if started_pids[rank] not in pids[m]:
                    fail(f"rank {rank} (pid {started_pids[rank]}) did not train in membership {m}")
        if pids[1] != {started_pids[0], started_pids[2]} or started_pids[3] not in pids[2]:
            fail(f"pids by membership epoch: {dict(pids)}; started: {started_pids}")
        # torchrun's variables as torchrun gives them: ranks in [0, WORLD_SIZE), and the
        # replacement in the slot of the worker it replaces (rank 1), after one restart.
        env_of = {s["pid"]: s["env"] for s in steps}
        want = {started_pids[0]: ("0", "0"), started_pids[2]: ("2", "0"),
                started_pids[3]: ("1", "1")}
        for pid, (slot, restarts) in want.items():
            e = env_of.get(pid, {})
            if (e.get("RANK"), e.get("LOCAL_RANK"), e.get("TORCHELASTIC_RESTART_COUNT"),
                    e.get("WORLD_SIZE"), e.get("LOCAL_WORLD_SIZE")) != (slot, slot, restarts,
                                                                         "3", "3"):
                fail(f"pid {pid}: environment {e}, expected slot {slot} after {restarts} restarts")
        per_rank_pids = {p["pid"] for p in summary["per_rank"]}
        if per_rank_pids != {started_pids[0], started_pids[2], started_pids[3]}:
            fail(f"summaries from {per_rank_pids}")

        # Each step counts as trained by the last membership epoch that trained it.
        by_step = collections.defaultdict(list)
        for s in steps:
            by_step[s["epoch"], s["step"]].append(s)
        counts = collections.Counter()
        for (epoch, step), recs in sorted(by_step.items()):
            last = max(s["membership"] for s in recs)
            kept = [s for s in recs if s["membership"] == last]
            if sorted(s["rank"] for s in kept) != list(range(kept[0]["world"])):
                fail(f"step {step}: ranks {[s['rank'] for s in kept]} of {kept[0]['world']}")
            for s in kept:
                counts.update((epoch, i) for i in s["samples"])
        for epoch in range(EPOCHS):
            seen = [counts[epoch, i] for i in range(SAMPLES)]
            if min(seen) != 1 or max(seen) != 1:
                lost = sum(1 for c in seen if c == 0)
                twice = sum(1 for c in seen if c > 1)
                fail(f"epoch {epoch}: {lost} samples never trained, {twice} trained twice")
        rolled_back = max(s["step"] for s in steps if s["membership"] == 0) - rolled[0]["restored_step"]
        print(f"elastic_test: rank 1 killed at step {KILL_AT}; survivors rolled back to step "
              f"{rolled[0]['restored_step']} ({rolled_back} steps), recovered in "
              f"{summary['recovery_seconds_max']:.2f} s, a replacement joined; every sample of "
              f"{EPOCHS} epochs trained once ({time.monotonic() - started:.1f} s)")


if __name__ == "__main__":
    main()
