#!/usr/bin/python3
"""torch.distributed.all_reduce through any backend: latency and bus bandwidth per size.

  torchrun --standalone --nproc_per_node 2 --redirects 1 --tee 1 bench/torch_allreduce.py \\
      --backend cohort --sizes 4K,64K,1M,16M,64M

Each size: float32 tensors, --warmup untimed calls, then --iters timed ones; every rank times
each call, the call's time is the slowest rank's (an allreduce is done when the last rank is),
and the result is the median of those (and, as nccl-tests reports, the mean over the loop).
busbw = 2 (n - 1) / n x bytes / time, the bytes each rank's links carry in a bandwidth-optimal
allreduce. Rank 0 prints one JSON line per size.
"""
import argparse
import json
import statistics
import time

import torch
import torch.distributed as dist


def parse_size(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * units[s[-1]] if s[-1] in units else int(s)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--backend", choices=["gloo", "cohort"], default="gloo")
    p.add_argument("--sizes", default="4K,64K,1M,16M,64M")
    p.add_argument("--iters", type=int, default=0, help="0: by size (more for small ones)")
    p.add_argument("--warmup", type=int, default=5)
    args = p.parse_args()
    torch.set_num_threads(1)
    if args.backend == "cohort":
        import cohort  # noqa: F401  (registers the backend)
    dist.init_process_group(args.backend)
    rank, n = dist.get_rank(), dist.get_world_size()
    for size in args.sizes.split(","):
        nbytes = parse_size(size)
        t = torch.ones(nbytes // 4, dtype=torch.float32)
        iters = args.iters or max(10, min(2000, (64 << 20) // max(nbytes, 1) * 2))
        for _ in range(args.warmup):
            dist.all_reduce(t)
        times = torch.zeros(iters, dtype=torch.float64)
        dist.barrier()
        for i in range(iters):
            t0 = time.perf_counter()
            dist.all_reduce(t)
            times[i] = time.perf_counter() - t0
        dist.all_reduce(times, op=dist.ReduceOp.MAX)
        if rank == 0:
            median = statistics.median(times.tolist())
            mean = times.mean().item()
            factor = 2 * (n - 1) / n if n > 1 else 1
            print(json.dumps({"backend": args.backend, "ranks": n, "size": size,
                              "bytes": nbytes, "iters": iters, "median_us": median * 1e6,
                              "mean_us": mean * 1e6,
                              "busbw_gbs": factor * nbytes / median / 1e9}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
