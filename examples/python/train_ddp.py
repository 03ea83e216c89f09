#!/usr/bin/python3
"""A PyTorch DDP training script, as written for torchrun, on Fashion-MNIST (Debian's
dataset-fashion-mnist). It runs on Gloo or on Cohort by changing one word, the backend:

    torchrun --nproc_per_node 2 --redirects 1 --tee 1 train_ddp.py --backend gloo
    torchrun --nproc_per_node 2 --redirects 1 --tee 1 train_ddp.py --backend cohort
    cohort run --workers 2 train_ddp.py --backend cohort     # a Cohort job: run directory,
                                                             # progress, console, hang reports

(For the cohort backend the package must be importable: `make install`, or
PYTHONPATH=build/release/python in a source checkout.)
"""
import argparse
import gzip
import os
import struct

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = struct.unpack(">I", data[:4])[0] & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(root, split):
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(os.path.join(root, f"{prefix}-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(root, f"{prefix}-labels-idx1-ubyte.gz"))
    return torch.from_numpy(x.astype(np.float32) / 255.0).reshape(-1, 784), \
        torch.from_numpy(y.astype(np.int64))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--backend", default="cohort", choices=["gloo", "cohort"])
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: none)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    args = p.parse_args()

    report = lambda step, **metrics: None  # noqa: E731
    if args.backend == "cohort":
        import cohort  # registers the backend
        report = cohort.report  # progress for `cohort run` (nothing under torchrun)
    dist.init_process_group(args.backend)  # env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    x, y = load(args.data, "train")
    sampler = torch.utils.data.distributed.DistributedSampler(range(len(y)), world, rank, seed=0)
    step = 0
    steps_per_epoch = (len(sampler) + args.batch_size - 1) // args.batch_size
    total = min(args.max_steps or 1 << 62, steps_per_epoch * args.epochs)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        idx = torch.tensor(list(iter(sampler)))
        for start in range(0, len(idx), args.batch_size):
            b = idx[start:start + args.batch_size]
            opt.zero_grad()
            loss = F.cross_entropy(ddp(x[b]), y[b])
            loss.backward()
            opt.step()
            step += 1
            if step % 10 == 0:
                report(step, loss=loss.item(), samples=10 * len(b), epoch=epoch,
                       epochs=args.epochs, total_steps=total)
            if rank == 0 and step % 100 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}", flush=True)
            if args.max_steps and step >= args.max_steps:
                break
    xt, yt = load(args.data, "test")
    with torch.no_grad():
        mine = torch.arange(rank, len(yt), world)
        correct = torch.tensor([(model(xt[mine]).argmax(1) == yt[mine]).sum().item(), len(mine)],
                               dtype=torch.float64)
    dist.all_reduce(correct)
    report(step, test_accuracy=(correct[0] / correct[1]).item())
    if rank == 0:
        print(f"done: {step} steps on {world} workers with {args.backend}, "
              f"test accuracy {correct[0] / correct[1]:.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
