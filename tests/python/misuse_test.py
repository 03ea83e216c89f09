"""Misuse gets a clear error naming the operation; a rank that does not join a collective, or
ranks that disagree on its shape, are named."""

import os
import shutil
import sys
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist

import cohort
import ranks

ranks.init("cohort")
gloo = dist.new_group(backend="gloo")
R, N = dist.get_rank(), dist.get_world_size()
assert N == 2


def raises(fn, *words, kind=RuntimeError):
    try:
        fn()
    except kind as e:
        for w in words:
            assert w in str(e), f"error without {w!r}: {e}"
        return str(e)
    sys.exit(f"rank {R}: no error from {fn}")


# Tensors Cohort does not take: refused on the caller's thread, naming the operation.
raises(lambda: dist.all_reduce(torch.zeros(4, 4).t()), "allreduce", "contiguous")
raises(lambda: dist.all_reduce(torch.zeros(3, device="meta")), "allreduce", "CPU")
raises(lambda: dist.broadcast(torch.zeros(2, dtype=torch.complex64), 0), "broadcast",
       "ComplexFloat")
raises(lambda: dist.all_reduce(torch.zeros(2), op=dist.ReduceOp.BXOR), "allreduce", "bxor")
raises(lambda: dist.all_reduce(torch.zeros(2, dtype=torch.int16)), "Short")
# A second init.
raises(lambda: ranks.init("cohort"), "twice")
# The default group still works after all of that.
t = torch.ones(3)
dist.all_reduce(t)
assert t.tolist() == [2.0, 2.0, 2.0], t

# Ranks that disagree on a collective's shape, found before any data moves.
os.environ["COHORT_CHECK_COLLECTIVES"] = "1"
checked = dist.new_group(backend="cohort")
del os.environ["COHORT_CHECK_COLLECTIVES"]
msg = raises(lambda: dist.all_reduce(torch.zeros(4 + R), group=checked), "allreduce #1",
             "rank", kind=cohort.ProtocolError)
print(f"rank {R}: mismatch: {msg}")

# A rank that never joins: the other's deadline names it, the collective and its number, and
# leaves a hang report (in COHORT_RUN_DIR, where `cohort run` puts its run directory).
report_dir = tempfile.mkdtemp()
os.environ["COHORT_RUN_DIR"] = report_dir
short = dist.new_group(backend="cohort", timeout=timedelta(seconds=2))
if R == 0:
    msg = raises(lambda: dist.all_reduce(torch.zeros(8), group=short), "allreduce #1",
                 "rank 1", "hang report: " + report_dir, kind=cohort.TimeoutError)
    print(f"rank 0: timeout: {msg}")
    report = open(os.path.join(report_dir, "hang-report.txt")).read()
    assert "rank 1" in report and "allreduce #1" in report, report
    print("rank 0: hang report:\n" + report[:600])
dist.barrier(group=gloo)
shutil.rmtree(report_dir)
print(f"rank {R}: every misuse was refused with a clear error")
