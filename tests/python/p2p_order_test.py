"""isend/irecv are asynchronous in torch.distributed: a rank may post its sends and receives in
any order before waiting on them, and every rank may post its send first (or its receive first).
Each pattern here runs on Gloo first (which shows it is valid), then on a cohort group of its own
with a short deadline, so a pattern Cohort deadlocks on fails in seconds, named."""

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
assert N >= 2
nxt, prv = (R + 1) % N, (R - 1) % N
BIG = 300001  # 1.2 MB of float32: more than the shared-memory ring or a socket buffer holds


def exchange(group, count, recv_first):
    """Sends to the next rank and receives from the previous one, both posted, then waited."""
    mine, got = torch.full((count,), float(R)), torch.empty(count)
    send = lambda: dist.isend(mine, nxt, group=group, tag=1)  # noqa: E731
    recv = lambda: dist.irecv(got, prv, group=group, tag=1)  # noqa: E731
    reqs = [recv(), send()] if recv_first else [send(), recv()]
    for req in reqs:
        req.wait()
    return got


def batch(group, count):
    """batch_isend_irecv as torch's documentation writes it: the send first, on every rank."""
    mine, got = torch.full((count,), float(R)), torch.empty(count)
    ops = [dist.P2POp(dist.isend, mine, nxt, group), dist.P2POp(dist.irecv, got, prv, group)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    return got


CASES = [
    ("every rank posts its irecv before its isend (3 floats)", lambda g: exchange(g, 3, True)),
    (f"every rank posts its isend before its irecv ({BIG} floats)",
     lambda g: exchange(g, BIG, False)),
    (f"batch_isend_irecv, isend first ({BIG} floats)", lambda g: batch(g, BIG)),
]

reports = tempfile.mkdtemp()
os.environ["COHORT_HANG_REPORT"] = os.path.join(reports, f"hang-report-rank{R}.txt")
failed = []
for name, case in CASES:
    got = case(gloo)
    assert torch.equal(got, torch.full_like(got, float(prv))), f"gloo: {name}: {got[:4]}"
    group = dist.new_group(backend="cohort", timeout=timedelta(seconds=3))
    try:
        got = case(group)
        if not torch.equal(got, torch.full_like(got, float(prv))):
            failed.append(f"{name}: received {got[:4].tolist()}, not rank {prv}'s data")
    except cohort.Error as e:
        failed.append(f"{name}: {type(e).__name__}: {e}")
    dist.barrier(group=gloo)
shutil.rmtree(reports)
if failed:
    sys.exit(f"rank {R}: patterns Gloo runs that Cohort does not:\n  " + "\n  ".join(failed))
print(f"rank {R}: every isend/irecv pattern ran as on Gloo")
