#!/usr/bin/python3
"""One elastic PyTorch script, two ways of surviving a lost worker (scripts/bench-python-elastic.sh):

- under `cohort run` (COHORT_JOIN set) it is a cohort.elastic job: commits are in memory, the
  survivors go on at the smaller size from the last commit and a replacement joins later;
- under TorchElastic (`torchrun --max_restarts 1`, Gloo) it is written the way TorchElastic asks:
  rank 0 writes the same state to disk at every commit (atomically), every rank loads the newest
  on start, and torchrun restarts every worker after a failure.

The model, data, sampler, state and commit interval are the same code for both. Job rank 1 kills
itself (SIGKILL) after completing --kill-step on the first attempt. Every rank appends a line per
completed step to <run-dir>/steps-<pid>.jsonl: {"attempt", "rank", "world", "step", "time"}
(attempt: the membership epoch under Cohort, the restart count under TorchElastic).
"""
import argparse
import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                                "python"))
import cohort  # noqa: E402
from train_ddp import load  # noqa: E402  (the Fashion-MNIST reader)

UNDER_COHORT = bool(os.environ.get("COHORT_JOIN"))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--run-dir", required=True)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--samples", type=int, default=30000)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--commit-every", type=int, default=10)
    p.add_argument("--kill-step", type=int, default=65)
    args = p.parse_args()

    torch.set_num_threads(1)
    x, y = load(args.data, "train")
    x, y = x[:args.samples], y[:args.samples]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    state = cohort.elastic.State(model=model, optimizer=opt,
                                 sampler=cohort.elastic.DistributedSampler(len(y), args.batch_size),
                                 step=0)
    ckpt = os.path.join(args.run_dir, "checkpoint.pt")
    if UNDER_COHORT:
        victim = os.environ.get("COHORT_JOB_RANK") == "1"
        attempt = cohort.elastic.membership_epoch
    else:
        restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        victim = os.environ.get("RANK") == "1" and restart == 0
        attempt = lambda: restart  # noqa: E731
        if os.path.exists(ckpt):
            state._saved = torch.load(ckpt)
            state.restore()
    log = open(os.path.join(args.run_dir, f"steps-{os.getpid()}.jsonl"), "a", buffering=1)

    def commit():
        state.commit()
        if not UNDER_COHORT and dist.get_rank() == 0:
            torch.save(state._saved, ckpt + ".tmp")
            os.replace(ckpt + ".tmp", ckpt)

    @cohort.elastic.run
    def train(state):
        ddp = nn.parallel.DistributedDataParallel(state.model)
        rank, world, at = dist.get_rank(), dist.get_world_size(), attempt()
        for b in state.sampler:
            opt.zero_grad()
            F.cross_entropy(ddp(x[b]), y[b]).backward()
            opt.step()
            state.step += 1
            log.write(json.dumps({"attempt": at, "rank": rank, "world": world, "step": state.step,
                                  "time": time.time()}) + "\n")
            cohort.report(state.step, samples=len(b))
            if victim and state.step == args.kill_step:
                os.kill(os.getpid(), signal.SIGKILL)
            if state.step % args.commit_every == 0:
                commit()

    if not UNDER_COHORT:
        dist.init_process_group("gloo")
    train(state)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
