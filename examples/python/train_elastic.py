#!/usr/bin/python3
"""Elastic PyTorch training on Fashion-MNIST with cohort.elastic: a worker lost mid-run costs the
steps since the last commit, not the job. The survivors roll back to the last commit and go on at
the new size without restarting; a replacement joins at a commit.

    cohort run examples/python/elastic.yaml        # 3 workers; rank 1 is killed at step 60

(The job file sets elastic.min_workers and elastic.max_restarts; see docs/python.md.)
"""
import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import cohort
from train_ddp import load  # the Fashion-MNIST reader beside this script


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--samples", type=int, default=0, help="train on the first N samples (0: all)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--commit-every", type=int, default=10)
    p.add_argument("--record", help="write each step's sample indices here (JSON lines)")
    args = p.parse_args()

    x, y = load(args.data, "train")
    if args.samples:
        x, y = x[:args.samples], y[:args.samples]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    sampler = cohort.elastic.DistributedSampler(len(y), args.batch_size, seed=0)
    state = cohort.elastic.State(model=model, optimizer=opt, sampler=sampler, epoch=0, step=0)
    record = open(args.record, "a", buffering=1) if args.record else None
    steps_per_epoch = (len(y) + 2 * args.batch_size - 1) // (2 * args.batch_size)

    @cohort.elastic.run
    def train(state):
        ddp = nn.parallel.DistributedDataParallel(state.model)
        rank, world = dist.get_rank(), dist.get_world_size()
        for state.epoch in range(state.epoch, args.epochs):
            state.sampler.set_epoch(state.epoch)
            for b in state.sampler:
                opt.zero_grad()
                loss = F.cross_entropy(ddp(x[b]), y[b])
                loss.backward()
                opt.step()
                state.step += 1
                if record:
                    record.write(json.dumps({"epoch": state.epoch, "step": state.step,
                                             "membership": cohort.elastic.membership_epoch(),
                                             "world": world, "rank": rank, "pid": os.getpid(),
                                             "samples": b}) + "\n")
                cohort.report(state.step, loss=loss.item(), samples=len(b), epoch=state.epoch,
                              epochs=args.epochs, total_steps=steps_per_epoch * args.epochs)
                if state.step % args.commit_every == 0:
                    state.commit()
        state.commit()

    train(state)
    if dist.get_rank() == 0:
        print(f"done: {state.step} steps on {dist.get_world_size()} workers", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
