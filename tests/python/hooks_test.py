"""Cohort's codecs as DDP communication hooks: for every codec, DDP trains an MLP with the hook;
the replicas end bit-identical (every rank decodes the same bits), the `none` hook matches plain
DDP on Gloo to float rounding, the lossy codecs stay close to it (within what their compression
and error feedback allow), a bucket DDP rebuilt with other parameters does not get the old ones'
residual, and a hook on a Gloo group is refused by name."""

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



class Bucket:
    """What a hook reads of DDP's GradBucket: bucket 0, holding the gradients of `params` flat."""

    def __init__(self, params, values):
        self._params, self._buf = params, values.clone()
        self._grads, at = [], 0
        for p in params:
            self._grads.append(self._buf[at:at + p.numel()].view(p.shape))
            at += p.numel()

    def buffer(self):
        return self._buf

    def index(self):
        return 0

    def gradients(self):
        return self._grads

    def parameters(self):
        return self._params


def residual_stays_with_its_parameters():
    """DDP rebuilds its buckets after the first step: bucket 0 may then hold other parameters. Its
    topk residual (99% of the first gradient) belongs to the old ones: carried into the same
    layout's next step, not into another layout's."""
    state = cohort.hooks.State()
    shapes = [(256, 256), (256,)]
    first = [torch.zeros(s) for s in shapes]
    other = [torch.zeros(s) for s in shapes]  # the same shapes: only their identity differs
    n = sum(p.numel() for p in first)
    grad = torch.linspace(-1.0, 1.0, n)
    zeros = torch.zeros(n)
    cohort.hooks.topk(state, Bucket(first, grad)).wait()
    carried = cohort.hooks.topk(state, Bucket(first, zeros)).wait()
    assert carried.abs().sum().item() > 0, "the residual was not carried into the next step"
    moved = cohort.hooks.topk(state, Bucket(other, zeros)).wait()
    assert moved.abs().sum().item() == 0, (
        f"a residual of other parameters was applied: {moved.abs().sum().item()}")
    print(f"rank {R}: a rebuilt bucket starts without the old layout's residual")


residual_stays_with_its_parameters()

try:
    cohort.hooks.State(process_group=gloo)
    sys.exit("a hook state on a gloo group was accepted")
except RuntimeError as e:
    assert "cohort backend" in str(e), e
dist.destroy_process_group()
