"""Cohort for PyTorch: the torch.distributed backend "cohort".

    import cohort  # registers the backend
    torch.distributed.init_process_group("cohort")

Every collective of the group then runs on Cohort's communicator: deadlines that name the ranks
not heard from, shared memory between ranks of one host, Cohort's allreduce algorithms. See
docs/python.md.
"""

import torch.distributed as _dist

from cohort._C import (  # noqa: F401  (re-exported)
    AbortedError,
    ConfigError,
    Error,
    PeerLostError,
    ProtocolError,
    TimeoutError,
    _create_process_group,
)

from cohort.job import report  # noqa: F401  (re-exported)
from cohort import job as _job
from cohort import elastic  # noqa: F401  (cohort.elastic)
from cohort import hooks  # noqa: F401  (cohort.hooks)

BACKEND = "cohort"

if not hasattr(_dist.Backend, BACKEND.upper()):
    _dist.Backend.register_backend(BACKEND, _create_process_group)

# A worker of a job `cohort run` started joins it on import (cohort/job.py).
_job._join()
