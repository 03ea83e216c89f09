"""What a test rank started by launch.py uses to join its job."""

import os
from datetime import timedelta

import torch.distributed as dist


def rank():
    return int(os.environ["RANK"])


def world_size():
    return int(os.environ["WORLD_SIZE"])


def store():
    """A client of the launcher's TCPStore."""
    return dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size(),
                         False, timedelta(seconds=60))


def init(backend, timeout_s=60):
    import cohort  # noqa: F401  (registers the backend)
    dist.init_process_group(backend, store=store(), rank=rank(), world_size=world_size(),
                            timeout=timedelta(seconds=timeout_s))
