"""Cohort's codecs as DDP communication hooks: for every codec, DDP trains an MLP with the hook;
the replicas end bit-identical (every rank decodes the same bits), the `none` hook matches plain
DDP on Gloo to float rounding, the lossy codecs stay close to it (within what their compression
and error feedback allow), and a hook on a Gloo group is refused by name."""

import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import cohort
import ranks

ranks.init("cohort")
gloo = dist.new_group(backend="gloo")
R, N = dist.get_rank(), dist.get_world_size()
torch.set_num_threads(1)
STEPS = 25


def mlp():
    torch.manual_seed(99)
    # Big enough that every bucket is above the codecs' 64 KiB floor.
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 64), nn.ReLU(),
                         nn.Linear(64, 10))


def train(hook=None, group=None):
    model = DDP(mlp(), process_group=group, bucket_cap_mb=0.5)
    if hook is not None:
        model.register_comm_hook(cohort.hooks.State(powersgd_warmup_steps=3), hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(R)
    for _ in range(STEPS):
        x = torch.randn(32, 784, generator=gen)
        y = torch.randint(0, 10, (32,), generator=gen)
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def replicas_agree(flat, what):
    lo, hi = flat.clone(), flat.clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    if not torch.equal(lo, hi):
        sys.exit(f"rank {R}: {what}: replicas differ by {(hi - lo).abs().max().item()}")


reference = train(group=gloo)
start = torch.cat([p.detach().reshape(-1) for p in mlp().parameters()])
moved = (reference - start).norm().item()
# How far each codec may end from uncompressed training, relative to how far training moved.
LIMITS = {"none": 1e-5, "fp16": 0.002, "bf16": 0.05, "int8": 0.1, "topk": 1.0, "powersgd": 1.0}
for name, limit in LIMITS.items():
    flat = train(getattr(cohort.hooks, name))
    replicas_agree(flat, name)
    off = (flat - reference).norm().item() / moved
    assert off <= limit, f"{name}: {off:.4f} of the training's movement away from plain DDP"
    assert (flat - start).norm().item() > 0.5 * moved, f"{name}: training did not move"
    print(f"rank {R}: hook {name}: replicas agree; {off:.2e} of the way off plain DDP")

try:
    cohort.hooks.State(process_group=gloo)
    sys.exit("a hook state on a gloo group was accepted")
except RuntimeError as e:
    assert "cohort backend" in str(e), e
dist.destroy_process_group()
