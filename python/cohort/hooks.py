"""Cohort's gradient codecs as DDP communication hooks.

    state = cohort.hooks.State()                      # the default group (backend "cohort")
    ddp.register_comm_hook(state, cohort.hooks.int8)  # or fp16, bf16, topk, powersgd, none

Each bucket DDP hands a hook is averaged over the group in the codec's compact form by the same
codecs Cohort's own DDP uses (`comm.compression` in a job file): fp16 and bf16 halve the bytes,
int8 quarters them (an f32 scale per chunk of 256, stochastic rounding), topk sends the
`topk_ratio` largest values of each tensor with their indices, powersgd rank-`powersgd_rank`
factors of each matrix after `powersgd_warmup_steps` steps of plain allreduce. With error
feedback (the default) what a step's compression drops is added to the next step's gradient, per
bucket; when DDP rebuilds its buckets after the first step, a bucket whose parameters changed
starts without one (the old one belongs to other coordinates). Buckets under `min_bytes` go uncompressed. Every rank ends with the same bits. Float32
CPU buckets only; the group must be a cohort one.
"""

import torch
import torch.distributed as dist

from cohort._C import _CompressionHooks


class State:
    """The hooks' state: one codec (and its residual) per bucket and method."""

    def __init__(self, process_group=None, error_feedback=True, topk_ratio=0.01,
                 topk_warmup_steps=0, powersgd_rank=4, powersgd_warmup_steps=10,
                 min_bytes=64 << 10, seed=0):
        group = process_group or dist.distributed_c10d._get_default_group()
        self._hooks = _CompressionHooks(group, error_feedback, topk_ratio, topk_warmup_steps,
                                        powersgd_rank, powersgd_warmup_steps, min_bytes, seed)


def _hook(method):
    def hook(state, bucket):
        fut = torch.futures.Future()
        buf = bucket.buffer()
        # The future completes with buf, averaged in place, from the hooks' thread.
        state._hooks.start(method, buf, bucket.index(), bucket.gradients(), bucket.parameters(),
                           fut, buf)
        return fut

    hook.__name__ = hook.__qualname__ = method
    hook.__doc__ = f"DDP communication hook: each bucket averaged with Cohort's {method} codec."
    return hook


none = _hook("none")
fp16 = _hook("fp16")
bf16 = _hook("bf16")
int8 = _hook("int8")
topk = _hook("topk")
powersgd = _hook("powersgd")
