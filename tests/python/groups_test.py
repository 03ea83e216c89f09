"""new_group over a subset of the ranks, with backend "cohort": collectives on the subgroup give
the right results on its members (against a Gloo group of the same ranks, and against the values
computed here), ranks outside it get GroupMember.NON_GROUP_MEMBER and no-op collectives, two
overlapping subgroups work side by side, and the default group still works after. 3 or more
ranks: subgroups [0, 2] and [1, ..., N-1]."""

import sys
import warnings

import torch
import torch.distributed as dist

import ranks

ranks.init("cohort")
R, N = dist.get_rank(), dist.get_world_size()
assert N >= 3, "groups_test needs 3 or more ranks"
warnings.filterwarnings("ignore", message=".*does not belong to the given group")

SUBSETS = [[0, 2], list(range(1, N))]
# Every rank makes every group, in the same order (torch.distributed's rule).
subgroups = [dist.new_group(members) for members in SUBSETS]
gloo_subgroups = [dist.new_group(members, backend="gloo") for members in SUBSETS]


def same(a, b, what):
    if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a, b):
        sys.exit(f"rank {R}: {what}: got {a.flatten()[:8].tolist()}, "
                 f"expected {b.flatten()[:8].tolist()}")


def value(rank, count, salt):
    return (torch.arange(count, dtype=torch.float64) % 97) * (rank + 1) + salt


def check_member(group, gloo, members):
    what = f"group {members}"
    assert dist.get_backend(group) == "cohort", dist.get_backend(group)
    assert dist.get_world_size(group) == len(members), (what, dist.get_world_size(group))
    assert dist.get_rank(group) == members.index(R), (what, dist.get_rank(group))
    for count in (1, 70001):
        mine = value(R, count, 1)
        a = mine.clone()
        dist.all_reduce(a, group=group)
        b = mine.clone()
        dist.all_reduce(b, group=gloo)
        same(a, b, f"{what}: all_reduce {count} (against gloo)")
        same(a, sum(value(m, count, 1) for m in members), f"{what}: all_reduce {count}")
        for root in members:  # a global rank, as torch.distributed takes it
            a = value(R, count, 2)
            dist.broadcast(a, root, group=group)
            same(a, value(root, count, 2), f"{what}: broadcast {count} from {root}")
        gathered = [torch.empty(count, dtype=torch.float64) for _ in members]
        dist.all_gather(gathered, value(R, count, 3), group=group)
        for i, m in enumerate(members):
            same(gathered[i], value(m, count, 3), f"{what}: all_gather {count} block {i}")
        blocks = [value(R * 10 + i, count, 4) for i in range(len(members))]
        out = torch.empty(count, dtype=torch.float64)
        dist.reduce_scatter(out, blocks, group=group)
        me = members.index(R)
        same(out, sum(value(m * 10 + me, count, 4) for m in members),
             f"{what}: reduce_scatter {count}")
    # send/recv between members: the first member sends to the last (global ranks).
    first, last = members[0], members[-1]
    if R == first:
        dist.send(value(R, 5, 6), last, group=group, tag=7)
    elif R == last:
        got = torch.empty(5, dtype=torch.float64)
        dist.recv(got, first, group=group, tag=7)
        same(got, value(first, 5, 6), f"{what}: recv from {first}")
    dist.barrier(group=group)


def check_non_member(group, members):
    what = f"group {members} on rank {R}"
    if group is not dist.GroupMember.NON_GROUP_MEMBER:
        sys.exit(f"{what}: new_group returned {group!r}, not GroupMember.NON_GROUP_MEMBER")
    t = torch.full((4,), float(R))
    # torch makes a collective on a group the rank is not in a no-op that returns None.
    if dist.all_reduce(t, group=group) is not None or dist.broadcast(t, members[0], group=group):
        sys.exit(f"{what}: a collective on a group this rank is not in did not return None")
    same(t, torch.full((4,), float(R)), f"{what}: a non-member's tensor changed")
    if dist.get_rank(group) != -1:
        sys.exit(f"{what}: get_rank is {dist.get_rank(group)}, not -1")


for group, gloo, members in zip(subgroups, gloo_subgroups, SUBSETS):
    if R in members:
        check_member(group, gloo, members)
    else:
        check_non_member(group, members)

# Both subgroups at once: rank 2 (in both) has an operation in flight on each; every member
# issues them in the same order.
works = []
outs = []
for group, members in zip(subgroups, SUBSETS):
    if R in members:
        t = value(R, 4099, 8)
        works.append(dist.all_reduce(t, group=group, async_op=True))
        outs.append((t, members))
for w in works:
    w.wait()
for t, members in outs:
    same(t, sum(value(m, 4099, 8) for m in members), f"group {members}: async all_reduce")

# The default group after all of that, then after the subgroups are destroyed.
for step in ("with the subgroups", "after destroying the subgroups"):
    t = value(R, 1023, 9)
    dist.all_reduce(t)
    same(t, sum(value(r, 1023, 9) for r in range(N)), f"default group {step}: all_reduce")
    b = value(R, 10, 10)
    dist.broadcast(b, N - 1)
    same(b, value(N - 1, 10, 10), f"default group {step}: broadcast")
    if step == "with the subgroups":
        for group in subgroups + gloo_subgroups:
            if group is not dist.GroupMember.NON_GROUP_MEMBER:
                dist.destroy_process_group(group)
dist.barrier()
dist.destroy_process_group()
print(f"rank {R}: subgroups {SUBSETS} agree, non-members are left out, the default group works")
