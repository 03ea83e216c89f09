#!/usr/bin/python3
"""TorchElastic peer for Cohort's recovery benchmark (scripts/bench-recovery.sh).

The MLP of examples/fashion-mlp.yaml on Fashion-MNIST (Debian's dataset-fashion-mnist), data
parallel with torch.distributed (Gloo) under torchrun, written the way TorchElastic asks for: rank 0
writes a checkpoint (model, optimizer, step) every --checkpoint-every steps, atomically, and every
rank loads the newest one on start, so that a restart after a failure goes on from there.

  /usr/bin/python3 -m torch.distributed.run --standalone --nproc_per_node 2 --max_restarts 1 \
      --redirects 1 --tee 1 bench/torchelastic_recovery.py --run-dir /tmp/te --checkpoint-every 50

Every rank appends one line per completed step to <run-dir>/steps-<rank>.txt: "<attempt> <step>
<unix time>", flushed, and writes its pid to <run-dir>/pid-<rank>-<attempt> on start, so that a
watcher can kill a worker at a given step and measure the time to the next completed step.
Rank 0 writes <run-dir>/resumed-<attempt> with the step it resumed from.
"""
import argparse
import gzip
import os
import struct
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(path):
    x = read_idx(os.path.join(path, "train-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(path, "train-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(x.astype(np.float32) / 255.0).unsqueeze(1)
    return x, torch.from_numpy(y.astype(np.int64))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--run-dir", required=True)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint-every", type=int, default=50)
    args = p.parse_args()

    torch.set_num_threads(1)
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    with open(os.path.join(args.run_dir, f"pid-{rank}-{attempt}"), "w") as f:
        f.write(str(os.getpid()))
    torch.manual_seed(args.seed)

    x_train, y_train = load(args.data)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                          nn.ReLU(), nn.Linear(128, 10))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=args.momentum)
    ckpt = os.path.join(args.run_dir, "checkpoint.pt")
    step = 0
    if os.path.exists(ckpt):
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step = state["step"]
    if rank == 0:
        with open(os.path.join(args.run_dir, f"resumed-{attempt}"), "w") as f:
            f.write(str(step))
    sampler = torch.utils.data.distributed.DistributedSampler(
        range(len(y_train)), num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    steps_per_epoch = (len(sampler) + args.batch_size - 1) // args.batch_size
    log = open(os.path.join(args.run_dir, f"steps-{rank}.txt"), "a", buffering=1)

    for epoch in range(step // steps_per_epoch, args.epochs):
        sampler.set_epoch(epoch)
        idx = torch.tensor(list(iter(sampler)))
        for i in range(step - epoch * steps_per_epoch, steps_per_epoch):
            b = idx[i * args.batch_size:(i + 1) * args.batch_size]
            opt.zero_grad()
            loss = F.cross_entropy(ddp(x_train[b]), y_train[b])
            loss.backward()
            opt.step()
            step += 1
            log.write(f"{attempt} {step} {time.time():.6f}\n")
            if rank == 0 and step % args.checkpoint_every == 0:
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                            "step": step}, ckpt + ".tmp")
                os.replace(ckpt + ".tmp", ckpt)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
