#!/usr/bin/python3
"""DDP with backend "cohort" and "gloo" in the same processes, arms interleaved every few steps.

On a machine whose speed moves between runs a minute apart (a virtual machine's neighbours), two
separate runs compare the machine's moments as much as the backends. Here each worker holds three
copies of one model (the same initial weights), trained on the same batches in the same order:

  cohort   torch's DistributedDataParallel over the default process group, backend "cohort"
  gloo     the same over a group of the same ranks with backend "gloo" (dist.new_group)
  none     the same model stepped locally, no gradient exchange at all: what any backend's step
           would be if its exchange cost nothing (the bound no backend can pass here)

and trains them in turn, --steps-per-block steps each, the order rotating every round so that none
always follows another. A block's time is the slowest rank's, from a barrier (outside the timing)
to its last optimizer step; a round's ratios compare blocks a few seconds apart. Launch with
torchrun (Debian's needs --redirects 1 --tee 1 on Python 3.11):

  /usr/bin/python3 -m torch.distributed.run --standalone --nproc_per_node 2 --redirects 1 --tee 1 \
      bench/ddp_interleaved.py --model cnn --memory-format channels_last

Rank 0 prints one JSON line per block ({"block": ...}) and a final one ({"interleaved": ...}) with
each arm's median samples/s, the per-round ratios' median and quartiles, the CPU time the process
groups' own threads took per step of each arm (what a backend's threads take from the
computation on a machine with as many workers as CPUs), and the CPU time the idle groups took
while the others ran (it must be next to none, or one arm slows the others).
"""
import argparse
import copy
import json
import os
import resource
import statistics
import sys
import threading
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The same models, data and arguments.
from pytorch_ddp import add_training_arguments, load, make_model, setup_worker  # noqa: E402


def quartiles(xs):
    xs = sorted(xs)
    if len(xs) < 2:
        return xs[0], xs[0]
    q = statistics.quantiles(xs, n=4)
    return q[0], q[2]


def other_threads_cpu_seconds():
    """CPU seconds of this process's threads other than the calling one (the process groups'
    own threads), from /proc."""
    me = threading.get_native_id()
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for tid in os.listdir("/proc/self/task"):
        if int(tid) == me:
            continue
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except OSError:
            continue
    return total / tick


def main():
    p = argparse.ArgumentParser()
    add_training_arguments(p)
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--steps-per-block", type=int, default=20)
    p.add_argument("--warmup-steps", type=int, default=5)
    args = p.parse_args()
    layout = setup_worker(args)

    import cohort  # noqa: F401  (registers the backend)
    dist.init_process_group("cohort")
    gloo = dist.new_group(backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)

    x_train, y_train = load(args.data, "train")
    base = make_model(args.model).to(memory_format=layout)
    arms = {}
    for name in ("cohort", "gloo", "none"):
        model = copy.deepcopy(base)
        net = (model if name == "none" else nn.parallel.DistributedDataParallel(
            model, process_group=None if name == "cohort" else gloo))
        opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=args.momentum)
        arms[name] = {"net": net, "opt": opt, "cursor": 0}
    sampler = torch.utils.data.distributed.DistributedSampler(
        range(len(y_train)), num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    order = torch.tensor(list(iter(sampler)))
    batches = [order[s:s + args.batch_size]
               for s in range(0, len(order) - args.batch_size + 1, args.batch_size)]

    def run(arm, steps):
        a = arms[arm]
        for _ in range(steps):
            b = batches[a["cursor"] % len(batches)]
            a["cursor"] += 1
            xb, yb = x_train[b].to(memory_format=layout), y_train[b]
            a["opt"].zero_grad()
            F.cross_entropy(a["net"](xb), yb).backward()
            a["opt"].step()

    def block(arm, steps):
        """The slowest rank's seconds for `steps` steps, and the CPU seconds per step that this
        rank's other threads (the process groups' own) took meanwhile, averaged over ranks."""
        dist.barrier(group=gloo)
        cpu0 = other_threads_cpu_seconds()
        t0 = time.perf_counter()
        run(arm, steps)
        seconds = time.perf_counter() - t0
        cpu = (other_threads_cpu_seconds() - cpu0) / steps
        both = torch.tensor([seconds, cpu / world], dtype=torch.float64)
        dist.all_reduce(both[:1], op=dist.ReduceOp.MAX, group=gloo)
        dist.all_reduce(both[1:], group=gloo)
        return both[0].item(), both[1].item()

    for arm in arms:
        run(arm, args.warmup_steps)  # DDP rebuilds its buckets after its first step

    # What an idle group costs: CPU of every thread but this one while this one sleeps.
    dist.barrier(group=gloo)
    before = other_threads_cpu_seconds()
    time.sleep(1.0)
    idle_cpu = other_threads_cpu_seconds() - before

    names = list(arms)
    per_arm = {n: [] for n in names}
    thread_cpu = {n: [] for n in names}
    ratios = {"cohort/gloo": [], "none/gloo": [], "none/cohort": []}
    rusage0 = resource.getrusage(resource.RUSAGE_SELF)
    for r in range(args.rounds):
        turn = names[r % len(names):] + names[:r % len(names)]
        sps = {}
        for arm in turn:
            seconds, cpu = block(arm, args.steps_per_block)
            sps[arm] = world * args.steps_per_block * args.batch_size / seconds
            per_arm[arm].append(sps[arm])
            thread_cpu[arm].append(cpu)
            if rank == 0:
                print(json.dumps({"block": arm, "round": r, "seconds": seconds,
                                  "samples_per_sec": sps[arm],
                                  "group_threads_cpu_ms_per_step": 1e3 * cpu}), flush=True)
        for key in ratios:
            a, b = key.split("/")
            ratios[key].append(sps[a] / sps[b])
    rusage1 = resource.getrusage(resource.RUSAGE_SELF)

    if rank == 0:
        print(json.dumps({"interleaved": {
            "model": args.model, "memory_format": args.memory_format, "workers": world,
            "bind_to": args.bind_to,
            "rounds": args.rounds, "steps_per_block": args.steps_per_block,
            "batch_size": args.batch_size,
            "samples_per_sec": {n: statistics.median(v) for n, v in per_arm.items()},
            "samples_per_sec_range": {n: [min(v), max(v)] for n, v in per_arm.items()},
            "ratio_median": {k: statistics.median(v) for k, v in ratios.items()},
            "ratio_quartiles": {k: quartiles(v) for k, v in ratios.items()},
            "ratios": ratios,
            "idle_groups_cpu_seconds_per_second": idle_cpu,
            "group_threads_cpu_ms_per_step": {n: 1e3 * statistics.median(v)
                                              for n, v in thread_cpu.items()},
            "involuntary_switches": rusage1.ru_nivcsw - rusage0.ru_nivcsw,
        }}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
