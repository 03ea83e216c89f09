"""torch's DistributedDataParallel on an MLP with backend "cohort" and with "gloo", same seed,
same data: after every step the parameters of the two agree to float rounding (bit for bit at
two ranks, where a sum of two has one order)."""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import ranks

ranks.init("cohort")
gloo = dist.new_group(backend="gloo")
R, N = dist.get_rank(), dist.get_world_size()
torch.set_num_threads(1)


def mlp():
    torch.manual_seed(1234)  # every rank and both backends start from the same weights
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                         nn.Linear(128, 10))


# Small buckets, so that several allreduces per step overlap the backward pass.
cohort_model = DDP(mlp(), bucket_cap_mb=0.25)
gloo_model = DDP(mlp(), process_group=gloo, bucket_cap_mb=0.25)
opts = [torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for m in (cohort_model, gloo_model)]
gen = torch.Generator().manual_seed(R)
tolerance = 0 if N <= 2 else 1e-6
for step in range(30):
    x = torch.randn(32, 784, generator=gen)
    y = torch.randint(0, 10, (32,), generator=gen)
    for model, opt in zip((cohort_model, gloo_model), opts):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    for (name, a), b in zip(cohort_model.named_parameters(), gloo_model.parameters()):
        err = (a - b).abs().max().item()
        assert err <= tolerance * max(1.0, b.abs().max().item()), \
            f"step {step}: {name} differs by {err} between cohort and gloo"
# And the replicas agree with each other (the point of data parallelism).
flat = torch.cat([p.detach().reshape(-1) for p in cohort_model.parameters()])
lo, hi = flat.clone(), flat.clone()
dist.all_reduce(lo, op=dist.ReduceOp.MIN)
dist.all_reduce(hi, op=dist.ReduceOp.MAX)
assert torch.equal(lo, hi), "replicas differ after training"
dist.destroy_process_group()
print(f"rank {R}: 30 DDP steps, cohort and gloo agree (tolerance {tolerance})")
