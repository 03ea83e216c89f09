"""Elastic training from Python, in the manner of Horovod's elastic API.

    state = cohort.elastic.State(model=model, optimizer=opt,
                                 sampler=cohort.elastic.DistributedSampler(len(data), 64),
                                 epoch=0, step=0)

    @cohort.elastic.run
    def train(state):
        ddp = DistributedDataParallel(state.model)      # on this membership's group
        for state.epoch in range(state.epoch, epochs):
            state.sampler.set_epoch(state.epoch)
            for batch in state.sampler:                 # this rank's indices
                ...                                     # forward, backward, step
                state.step += 1
                if state.step % 20 == 0:
                    state.commit()

    train(state)

Under `cohort run` (with `elastic.min_workers` below `workers`, or `elastic.max_restarts`), when a
worker is lost the survivors' collectives are aborted, they roll back to the last commit, the
process group is made again at the new size without restarting them, and `train` runs again from
the committed state; a replacement worker joins at a commit, receiving the state from rank 0.
TorchElastic restarts every worker instead. The sampler's position is part of the state, so no
sample of an epoch is lost or trained twice across a change of world size. Outside a Cohort job
(torchrun) `run` makes the group from the environment and calls the function once.
"""

import copy
import datetime
import functools
import json
import os
import sys

import torch
import torch.distributed as dist

from cohort import _C
from cohort import job as _job


class _MembershipChange(Exception):
    """A worker waits to join: every member leaves its epoch at this commit."""


class DistributedSampler:
    """The indices of an epoch (shuffled by seed + epoch), handed out in global blocks of
    world_size x batch_size: block b is the samples [b*W*B, (b+1)*W*B) of the epoch's order after
    those already trained, rank r getting the r-th part. How far the epoch got is a count of
    samples, so after a change of world size the rest of the epoch is shared out anew. The last
    block is shared as evenly as it goes (ranks differ by one sample at most)."""

    def __init__(self, dataset_size, batch_size, shuffle=True, seed=0):
        if dataset_size < 1 or batch_size < 1:
            raise ValueError("cohort.elastic.DistributedSampler: dataset_size and batch_size "
                             "must be positive")
        self.size, self.batch_size, self.shuffle, self.seed = dataset_size, batch_size, shuffle, seed
        self.epoch = 0
        self.processed = 0  # samples of this epoch handed out, all ranks together

    def set_epoch(self, epoch):
        if epoch != self.epoch:
            self.epoch, self.processed = epoch, 0

    def _order(self):
        if not self.shuffle:
            return torch.arange(self.size)
        g = torch.Generator()
        g.manual_seed(self.seed + self.epoch)
        return torch.randperm(self.size, generator=g)

    def __iter__(self):
        rank, world = dist.get_rank(), dist.get_world_size()
        order = self._order()
        while self.processed < self.size:
            block = order[self.processed:self.processed + world * self.batch_size]
            share, extra = divmod(len(block), world)
            start = rank * share + min(rank, extra)
            self.processed += len(block)
            yield block[start:start + share + (1 if rank < extra else 0)].tolist()

    def __len__(self):
        per_step = dist.get_world_size() * self.batch_size
        return (self.size - self.processed + per_step - 1) // per_step

    def state_dict(self):
        return {"epoch": self.epoch, "processed": self.processed}

    def load_state_dict(self, d):
        self.epoch, self.processed = d["epoch"], d["processed"]


class State:
    """What the workers agree on and roll back to: a model's and an optimizer's state, a sampler's
    position, and any other values given as keywords (read and set as attributes)."""

    def __init__(self, model=None, optimizer=None, sampler=None, **values):
        self.model, self.optimizer, self.sampler = model, optimizer, sampler
        self._values = list(values)
        for k, v in values.items():
            setattr(self, k, v)
        self._saved = None

    def _capture(self):
        return {
            "model": self.model.state_dict() if self.model is not None else None,
            "optimizer": self.optimizer.state_dict() if self.optimizer is not None else None,
            "sampler": self.sampler.state_dict() if self.sampler is not None else None,
            "values": {k: getattr(self, k) for k in self._values},
        }

    def save(self):
        """Keeps a copy of the state to roll back to (what commit() does, without its check)."""
        self._saved = copy.deepcopy(self._capture())

    def commit(self):
        """Keeps a copy of the state to roll back to. If a worker waits to join, every member
        leaves its membership epoch here (the function of `run` starts again, at this state)."""
        self.save()
        if not _job._state["joined"]:
            return
        # Each rank's heartbeat sees a request at its own moment: every rank leaves if any saw
        # one, so that none goes on into the next step's collectives alone.
        seen = torch.tensor([1 if _C._job_change_requested() else 0], dtype=torch.int32)
        dist.all_reduce(seen, op=dist.ReduceOp.MAX)
        if seen.item():
            raise _MembershipChange()

    def restore(self):
        """Back to the last commit."""
        saved = copy.deepcopy(self._saved)
        if self.model is not None:
            self.model.load_state_dict(saved["model"])
        if self.optimizer is not None:
            self.optimizer.load_state_dict(saved["optimizer"])
        if self.sampler is not None:
            self.sampler.load_state_dict(saved["sampler"])
        for k, v in saved["values"].items():
            setattr(self, k, v)

    def sync(self):
        """Every rank takes rank 0's committed state."""
        box = [self._saved]
        dist.broadcast_object_list(box, src=0)
        self._saved = box[0]
        self.restore()


def membership_epoch():
    """The membership epoch this worker trains in (0 outside a Cohort job)."""
    return _C._job_join()[0] if _job._state["joined"] else 0


_store = None


def _make_group(epoch, rank, world):
    global _store
    if _store is None:
        _store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                               is_master=False, timeout=datetime.timedelta(minutes=5))
    dist.init_process_group("cohort", store=dist.PrefixStore(f"cohort/epoch/{epoch}", _store),
                            rank=rank, world_size=world)


def _failure_of(error):
    """Why the job's communicator failed, when `error` comes from that (DDP reraises it as a
    RuntimeError); None for an error of the script's own."""
    failure = _C._job_comm_failure()
    if failure is None and isinstance(error, (_C.PeerLostError, _C.TimeoutError, _C.AbortedError)):
        failure = str(error)
    return failure


def run(func):
    """Runs `func(state, ...)` until it returns, starting it again from the last commit after
    every change of membership."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        if not _job._state["joined"]:
            # Not a worker of a Cohort job (torchrun, a test): one attempt on the environment's
            # group.
            if not dist.is_initialized():
                dist.init_process_group("cohort")
            state.save()
            state.sync()
            return func(state, *args, **kwargs)
        try:
            epoch, rank, world = _C._job_join()
            _make_group(epoch, rank, world)
            while True:
                state.save()
                state.sync()
                try:
                    return func(state, *args, **kwargs)
                except _MembershipChange:
                    reason, info = "", {"step": getattr(state, "step", 0)}
                except Exception as e:  # noqa: BLE001 (re-raised unless the group failed)
                    reason = _failure_of(e)
                    if reason is None:
                        raise
                    at = getattr(state, "step", 0)
                    state.restore()
                    back = getattr(state, "step", 0)
                    info = {"step": at, "restored_step": back, "steps_rolled_back": at - back}
                    print(f"cohort.elastic: rank {_C._job_rank()} leaves membership epoch {epoch} "
                          f"at step {at}, back to step {back}: {reason}", file=sys.stderr,
                          flush=True)
                dist.destroy_process_group()
                epoch, rank, world = _C._job_rejoin(json.dumps(info), reason)
                _make_group(epoch, rank, world)
        except _C.ExcludedError as e:
            # The job went on without this worker: its state is not the job's any more.
            print(f"cohort.elastic: {e}", file=sys.stderr, flush=True)
            _job._state["excluded"] = True
            sys.exit(3)

    return wrapper
