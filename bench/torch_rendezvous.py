#!/usr/bin/python3
"""torchrun's side of Cohort's rendezvous benchmark (scripts/bench-rendezvous.sh): the smallest job
that has to rendezvous, form its process group and complete one training step.

    torchrun --nnodes 16 --nproc_per_node 8 --rdzv-backend c10d ... bench/torch_rendezvous.py \
        --run-dir DIR

Every worker forms the Gloo process group, wraps Cohort's `mlp` (784-256-128-10) in DDP (which broadcasts the
parameters from rank 0) and completes one step on a synthetic batch of 8 (its gradients allreduced
across all workers). Rank 0 writes "<unix time>" to <run-dir>/first-step once that step is done:
rank 0 cannot finish the step's allreduce before every worker has joined it.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--run-dir", required=True)
    args = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                      nn.Linear(128, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.rand(8, 1, 28, 28), torch.randint(0, 10, (8,))
    opt.zero_grad()
    F.cross_entropy(model(x), y).backward()
    opt.step()
    if dist.get_rank() == 0:
        with open(os.path.join(args.run_dir, "first-step.tmp"), "w") as f:
            f.write("%.6f" % time.time())
        os.replace(os.path.join(args.run_dir, "first-step.tmp"),
                   os.path.join(args.run_dir, "first-step"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
