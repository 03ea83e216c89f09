"""init_process_group("cohort", timeout=...) sets the deadline of the default group's
collectives: with 2 s, a rank that never enters an all_reduce is named by the other's
cohort.TimeoutError about 2 s later (not torch's default of 30 minutes), with the collective and
its sequence number, and a hang report; the group is dead afterwards on both ranks. Before that, a
recv whose send never comes, on a group with the same deadline, is named with its hang report
naming the rank that never sent. The env:// rendezvous on the launcher's store, as under
torchrun's agent."""

import os
import shutil
import sys
import tempfile
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import cohort
import ranks

# env://, every rank a client of launch.py's store (as of torchrun's agent store)
os.environ.update(TORCHELASTIC_USE_AGENT_STORE="True", TORCHELASTIC_RESTART_COUNT="0")
report_dir = tempfile.mkdtemp()
report = os.path.join(report_dir, "hang-report.txt")
os.environ["COHORT_HANG_REPORT"] = report
dist.init_process_group("cohort", timeout=timedelta(seconds=2))
R, N = dist.get_rank(), dist.get_world_size()
assert N == 2 and dist.get_backend() == "cohort"
store = ranks.store()  # the test's own hand-shake, outside the group under test

t = torch.ones(8)
dist.all_reduce(t)  # allreduce #1: both ranks
assert t.tolist() == [2.0] * 8, t

# A recv whose send never comes, on a group of its own with a 2 s deadline: the timeout names the
# recv, and its hang report the rank that never sent the message.
p2p = dist.new_group(backend="cohort", timeout=timedelta(seconds=2))
if R == 0:
    try:
        dist.recv(torch.zeros(1000), src=1, group=p2p, tag=5)
        sys.exit("rank 0: recv returned without a send")
    except cohort.TimeoutError as e:
        msg = str(e)
    print(f"rank 0: recv: {msg}", flush=True)
    for want in ("recv from rank 1 (tag 5)", "hang report: " + report):
        assert want in msg, f"recv timeout without {want!r}: {msg}"
    text = open(report).read()
    for want in ("no collective is in flight; rank 0 has waited ",
                 "in recv from rank 1 (tag 5, 4.0 KB), which rank 1 never sent (posted no send "
                 "to rank 0 with tag 5)"):
        assert want in text, text
    store.set("rank0_recv_timed_out", "1")
else:
    store.wait(["rank0_recv_timed_out"], timedelta(seconds=30))

if R == 0:
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(8))  # allreduce #2: rank 1 never enters it
        sys.exit("rank 0: all_reduce returned without rank 1")
    except cohort.TimeoutError as e:
        took, msg = time.monotonic() - start, str(e)
    print(f"rank 0: after {took:.2f} s: {msg}", flush=True)
    for want in ("allreduce #2", "timed out after 2000 ms", "rank 1", "hang report: " + report):
        assert want in msg, f"timeout without {want!r}: {msg}"
    assert 1.9 <= took < 10, f"the 2 s deadline fired after {took:.2f} s"
    text = open(report).read()
    assert "rank 1 never entered allreduce #2" in text, text
    store.set("rank0_timed_out", "1")
    # A group whose collective failed is dead: the next one fails at once, not after a deadline.
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(8))
        sys.exit("rank 0: the dead group ran an all_reduce")
    except cohort.Error as e:
        print(f"rank 0: next all_reduce: {type(e).__name__}: {e}", flush=True)
    assert time.monotonic() - start < 1.5, "the dead group's all_reduce waited for a deadline"
else:
    store.wait(["rank0_timed_out"], timedelta(seconds=30))
    # Rank 0 gave up on this rank and closed its connections: this rank's next collective fails.
    try:
        dist.all_reduce(torch.ones(8))
        sys.exit("rank 1: all_reduce on a group whose peer gave up returned")
    except cohort.Error as e:
        print(f"rank 1: {type(e).__name__}: {e}", flush=True)
shutil.rmtree(report_dir)
print(f"rank {R}: the 2 s deadline of the default group named rank 1", flush=True)
