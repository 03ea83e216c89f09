"""Every torch.distributed collective with backend "cohort" against backend "gloo" on the same
inputs, in one job: the default group is Cohort's, a second group over the same ranks is Gloo's.
Where Gloo refuses a case (AVG, reduce_scatter, some types with some ops) the result is checked
against the reduction computed here from every rank's inputs instead, and the case is counted."""

import math
import sys
import warnings

import torch
import torch.distributed as dist

import ranks

ranks.init("cohort")
warnings.filterwarnings("ignore", message=".*all_reduce_coalesced will be deprecated")
gloo = dist.new_group(backend="gloo")
R, N = dist.get_rank(), dist.get_world_size()
assert dist.get_backend() == "cohort", dist.get_backend()

COUNTS = [0, 1, 5, 1023, 70001]
DTYPES = [torch.float32, torch.float64, torch.int64, torch.int32, torch.float16, torch.bfloat16,
          torch.int8, torch.uint8, torch.bool]
Op = dist.ReduceOp
OPS = [Op.SUM, Op.AVG, Op.PRODUCT, Op.MIN, Op.MAX, Op.BAND, Op.BOR, Op.BXOR]
BITWISE = (Op.BAND, Op.BOR, Op.BXOR)
counted = {"against gloo": 0, "against the reference": 0, "refused": 0}


def data(dtype, count, rank, salt, op=Op.SUM):
    """Inputs whose reductions are exact in every type (small integers; +-1, +-2 for products)."""
    g = torch.Generator().manual_seed(7919 * rank + salt)
    if dtype == torch.bool:
        return torch.randint(0, 2, (count,), generator=g).bool()
    if op == Op.PRODUCT:
        v = torch.randint(1, 3, (count,), generator=g)
        if dtype != torch.uint8:
            v = v * (torch.randint(0, 2, (count,), generator=g) * 2 - 1)
        return v.to(dtype)
    lo = 0 if dtype == torch.uint8 else -8
    return torch.randint(lo, 9, (count,), generator=g).to(dtype)


def reference(dtype, op, inputs):
    wide = [t.to(torch.int64) if not t.is_floating_point() else t.to(torch.float64) for t in inputs]
    acc = wide[0].clone()
    for t in wide[1:]:
        if op in (Op.SUM, Op.AVG):
            acc = acc | t if dtype == torch.bool else acc + t
        elif op == Op.PRODUCT:
            acc = acc & t if dtype == torch.bool else acc * t
        elif op == Op.MIN:
            acc = torch.minimum(acc, t)
        elif op == Op.MAX:
            acc = torch.maximum(acc, t)
        elif op == Op.BAND:
            acc = acc & t
        elif op == Op.BOR:
            acc = acc | t
        elif op == Op.BXOR:
            acc = acc ^ t
    if op == Op.AVG:
        acc = acc / N if dtype.is_floating_point else torch.div(acc, N, rounding_mode="trunc")
    return acc.to(dtype)


def same(a, b, what):
    if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a, b):
        diff = (a != b).nonzero()[:5].flatten().tolist() if a.shape == b.shape else "shape"
        sys.exit(f"rank {R}: {what}: cohort {a[:8].tolist()} != expected {b[:8].tolist()} "
                 f"(first differences at {diff})")


def refused(fn, what):
    try:
        fn()
    except RuntimeError as e:
        assert "cohort" in str(e) or "avg" in str(e) or "needs integer" in str(e), (what, str(e))
        counted["refused"] += 1
        return True
    return False


def applies(dtype, op):
    if op in BITWISE and dtype.is_floating_point:
        return False
    return not (op == Op.AVG and dtype == torch.bool)


def check_all_reduce():
    for dtype in DTYPES:
        for op in OPS:
            for count in COUNTS:
                what = f"all_reduce {dtype} {op} count {count}"
                mine = data(dtype, count, R, count, op)
                ours = mine.clone()
                if not applies(dtype, op):
                    assert refused(lambda: dist.all_reduce(ours, op=op), what), what
                    continue
                dist.all_reduce(ours, op=op)
                theirs = mine.clone()
                try:
                    dist.all_reduce(theirs, op=op, group=gloo)
                    same(ours, theirs, what + " (against gloo)")
                    counted["against gloo"] += 1
                except RuntimeError:
                    pass
                every = [data(dtype, count, r, count, op) for r in range(N)]
                same(ours, reference(dtype, op, every), what)
                counted["against the reference"] += 1


def check_random_floats():
    """Random (not integer) floats: Cohort and Gloo may add in different orders, so close."""
    for count in (3, 4099, 300001):
        g = torch.Generator().manual_seed(R * 31 + count)
        x = torch.randn(count, generator=g, dtype=torch.float32)
        a, b = x.clone(), x.clone()
        dist.all_reduce(a)
        dist.all_reduce(b, group=gloo)
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-5), f"random float32 sums differ ({count})"


def against(ours, gloo_call, expected, what):
    """ours against Gloo's result where Gloo takes the case, against `expected` otherwise."""
    try:
        theirs = gloo_call()
    except RuntimeError:
        theirs = None
    if theirs is not None:
        same(ours, theirs, what + " (against gloo)")
        counted["against gloo"] += 1
    else:
        counted["against the reference"] += 1
    same(ours, expected, what)


def check_rooted():
    for dtype in (torch.float32, torch.float64, torch.int64, torch.uint8, torch.bool):
        for count in COUNTS:
            for root in range(N):
                what = f"{dtype} count {count} root {root}"
                x = data(dtype, count, R, root)
                every = [data(dtype, count, r, root) for r in range(N)]

                a = x.clone()
                dist.broadcast(a, root)

                def gloo_broadcast():
                    b = x.clone()
                    dist.broadcast(b, root, group=gloo)
                    return b
                against(a, gloo_broadcast, every[root], "broadcast " + what)

                for op in (Op.SUM, Op.MAX):
                    a = x.clone()
                    dist.reduce(a, root, op=op)

                    def gloo_reduce():
                        b = x.clone()
                        dist.reduce(b, root, op=op, group=gloo)
                        return b if R == root else x
                    against(a, gloo_reduce, reference(dtype, op, every) if R == root else x,
                            f"reduce {op} " + what)

                ga = [torch.empty_like(x) for _ in range(N)] if R == root else None
                dist.gather(x, ga, dst=root)

                def gloo_gather():
                    gb = [torch.empty_like(x) for _ in range(N)] if R == root else None
                    dist.gather(x, gb, dst=root, group=gloo)
                    return torch.cat(gb) if R == root else torch.cat(every)
                against(torch.cat(ga) if R == root else torch.cat(every), gloo_gather,
                        torch.cat(every), "gather " + what)

                blocks = [data(dtype, count, 100 + r, root) for r in range(N)]
                sa = torch.empty_like(x)
                dist.scatter(sa, blocks if R == root else None, src=root)

                def gloo_scatter():
                    sb = torch.empty_like(x)
                    dist.scatter(sb, blocks if R == root else None, src=root, group=gloo)
                    return sb
                against(sa, gloo_scatter, blocks[R], "scatter " + what)


def gloo_takes(count):
    """Gloo's allgather and all-to-all divide by zero on empty tensors (SIGFPE, the process
    dies): those cases are checked against the reference only."""
    return count > 0


def check_gathers():
    for dtype in (torch.float32, torch.int64, torch.int8, torch.bool):
        for count in COUNTS:
            x = data(dtype, count, R, 3)
            every = torch.cat([data(dtype, count, r, 3) for r in range(N)])
            a = [torch.empty_like(x) for _ in range(N)]
            dist.all_gather(a, x)

            def gloo_all_gather():
                if not gloo_takes(count):
                    return None
                b = [torch.empty_like(x) for _ in range(N)]
                dist.all_gather(b, x, group=gloo)
                return torch.cat(b)
            against(torch.cat(a), gloo_all_gather, every, f"all_gather {dtype} {count}")
            flat = torch.empty(N * count, dtype=dtype)
            dist.all_gather_into_tensor(flat, x)
            same(flat, every, f"all_gather_into_tensor {dtype} {count}")
            counted["against the reference"] += 1


def check_reduce_scatter():
    # Gloo 1.13 has no reduce_scatter: the reference is Gloo's allreduce, sliced.
    for dtype in (torch.float32, torch.float64, torch.int64, torch.uint8):
        for op in (Op.SUM, Op.MAX, Op.PRODUCT):
            for count in (0, 1, 7, 20001):
                blocks = [data(dtype, count, R * N + b, 5, op) for b in range(N)]
                out = torch.empty(count, dtype=dtype)
                dist.reduce_scatter(out, blocks, op=op)
                full = torch.cat(blocks)
                dist.all_reduce(full, op=op, group=gloo)
                same(out, full[R * count:(R + 1) * count], f"reduce_scatter {dtype} {op} {count}")
                out2 = torch.empty(count, dtype=dtype)
                dist.reduce_scatter_tensor(out2, torch.cat(blocks), op=op)
                same(out2, out, f"reduce_scatter_tensor {dtype} {op} {count}")
                counted["against the reference"] += 2


def check_all_to_all():
    for dtype in (torch.float32, torch.int64, torch.uint8):
        for rows in (0, 1, 6):
            # all_to_all_single, equal splits: rank a sends rank b rows [b * rows, (b + 1) * rows)
            # of its input. Gloo dies on empty tensors, so rows 0 is checked against the
            # reference only (and the uneven and list forms below still run with it).
            ins = [data(dtype, N * rows * 4, q, 9).reshape(N * rows, 4) for q in range(N)]
            x = ins[R]
            a = torch.empty_like(x)
            dist.all_to_all_single(a, x)

            def gloo_equal():
                if not gloo_takes(rows):
                    return None
                b = torch.empty_like(x)
                dist.all_to_all_single(b, x, group=gloo)
                return b
            against(a, gloo_equal, torch.cat([ins[q][R * rows:(R + 1) * rows] for q in range(N)]),
                    f"all_to_all_single {dtype} rows {rows}")
            # Uneven splits: rank a sends rank b (a + b) % 3 + rows rows (some of them empty
            # when rows is 0).
            def splits(r):
                return [(r + q) % 3 + rows for q in range(N)]
            ins = [data(dtype, sum(splits(q)) * 4, q, 11).reshape(sum(splits(q)), 4)
                   for q in range(N)]
            send, recv = splits(R), [(q + R) % 3 + rows for q in range(N)]
            x = ins[R]
            a = torch.empty(sum(recv), 4, dtype=dtype)
            dist.all_to_all_single(a, x, recv, send)
            expected = torch.cat([ins[q][sum(splits(q)[:R]):sum(splits(q)[:R + 1])]
                                  for q in range(N)])

            def gloo_uneven():
                if sum(recv) == 0 or sum(send) == 0:
                    return None  # an empty tensor (1 rank, rows 0): Gloo would die
                b = torch.empty(sum(recv), 4, dtype=dtype)
                dist.all_to_all_single(b, x, recv, send, group=gloo)
                return b
            against(a, gloo_uneven, expected, f"all_to_all_single uneven {dtype} rows {rows}")
            # all_to_all with a list of tensors of different sizes
            ins = [data(dtype, (R + q) % 4 + rows, R * N + q, 13) for q in range(N)]
            outs = [torch.empty((q + R) % 4 + rows, dtype=dtype) for q in range(N)]
            dist.all_to_all(outs, ins)  # Gloo 1.13 has no all_to_all of lists
            for q in range(N):
                same(outs[q], data(dtype, (q + R) % 4 + rows, q * N + R, 13),
                     f"all_to_all {dtype} rows {rows} from {q}")
            counted["against the reference"] += 1


def check_all_reduce_coalesced():
    """Several tensors of one type and different shapes (one of them empty) in one call."""
    shapes = [(3,), (0,), (4, 5), (70001,), (2, 3, 2)]
    for dtype in (torch.float32, torch.float64, torch.int64, torch.uint8):
        for op in (Op.SUM, Op.MAX, Op.MIN, Op.PRODUCT):
            what = f"all_reduce_coalesced {dtype} {op}"
            mine = [data(dtype, math.prod(s), R, 21 + i, op).reshape(s)
                    for i, s in enumerate(shapes)]
            ours = [t.clone() for t in mine]
            dist.all_reduce_coalesced(ours, op=op)
            theirs = [t.clone() for t in mine]
            dist.all_reduce_coalesced(theirs, op=op, group=gloo)
            for i, s in enumerate(shapes):
                every = [data(dtype, math.prod(s), r, 21 + i, op).reshape(s) for r in range(N)]
                same(ours[i], theirs[i], f"{what} tensor {i} (against gloo)")
                same(ours[i], reference(dtype, op, every), f"{what} tensor {i}")
            counted["against gloo"] += 1
            counted["against the reference"] += 1
    # async_op=True: torch hands back the work's future; the tensors hold the sums when it is done.
    ts = [torch.full((5,), float(R + 1)), torch.full((2, 2), float(10 * R))]
    fut = dist.all_reduce_coalesced(ts, async_op=True)
    fut.wait()
    same(ts[0], torch.full((5,), float(N * (N + 1) // 2)), "async all_reduce_coalesced 0")
    same(ts[1], torch.full((2, 2), float(10 * N * (N - 1) // 2)), "async all_reduce_coalesced 1")
    counted["against the reference"] += 1


def check_point_to_point():
    for count in (0, 3, 100000):
        x = data(torch.float32, count, R, 17)
        if N == 1:
            break
        nxt, prv = (R + 1) % N, (R - 1) % N
        got = torch.empty_like(x)
        if R % 2 == 0:
            dist.send(x, nxt, tag=count)
            dist.recv(got, prv, tag=count)
        else:
            dist.recv(got, prv, tag=count)
            dist.send(x, nxt, tag=count)
        same(got, data(torch.float32, count, prv, 17), f"send/recv {count}")
        counted["against the reference"] += 1


def check_nonblocking_point_to_point():
    """isend/irecv and batch_isend_irecv around the ring, on Cohort's group and Gloo's: every
    operation of a rank posted before any is waited on, two tags received in the opposite order
    to the sends, messages from empty to larger than the transport's buffers. Even ranks post
    their sends first, odd ranks their receives, as in check_point_to_point. (Every rank posting
    its sends first, or its receives first: p2p_order_test.py.)"""
    if N == 1:
        return
    nxt, prv = (R + 1) % N, (R - 1) % N
    for group, name in ((None, "cohort"), (gloo, "gloo")):
        for count in (0, 5, 300001):
            what = f"isend/irecv {name} count {count}"
            x1 = data(torch.float32, count, R, 31)
            x2 = data(torch.int64, count + 1, R, 32)
            got1, got2 = torch.empty_like(x1), torch.empty_like(x2)
            sends = [lambda: dist.isend(x1, nxt, group=group, tag=1),
                     lambda: dist.isend(x2, nxt, group=group, tag=2)]
            recvs = [lambda: dist.irecv(got2, prv, group=group, tag=2),
                     lambda: dist.irecv(got1, prv, group=group, tag=1)]
            reqs = [post() for post in (sends + recvs if R % 2 == 0 else recvs + sends)]
            for req in reqs:
                req.wait()
            same(got1, data(torch.float32, count, prv, 31), what + " tag 1")
            same(got2, data(torch.int64, count + 1, prv, 32), what + " tag 2")
            counted["against the reference"] += 1
            x3 = data(torch.float64, count, R, 33)
            got3 = torch.empty_like(x3)
            send = dist.P2POp(dist.isend, x3, nxt, group, tag=3)
            recv = dist.P2POp(dist.irecv, got3, prv, group, tag=3)
            for req in dist.batch_isend_irecv([send, recv] if R % 2 == 0 else [recv, send]):
                req.wait()
            same(got3, data(torch.float64, count, prv, 33), what + " batch_isend_irecv")
            counted["against the reference"] += 1


def check_async_and_futures():
    x = torch.arange(10, dtype=torch.float32) + R
    work = dist.all_reduce(x, async_op=True)
    fut = work.get_future()
    doubled = fut.then(lambda f: f.value()[0] * 2).wait()
    assert work.is_completed()
    want = (torch.arange(10, dtype=torch.float32) * N + sum(range(N)))
    same(x, want, "async all_reduce")
    same(doubled, want * 2, "future chained on an all_reduce")
    dist.barrier()
    dist.barrier(group=gloo)


def check_strided_lists():
    """Gather and all_gather into list tensors that are views with strides of their own (a
    transpose) and scatter from them: written and read through their strides, as with gloo."""
    def block(r):
        return torch.arange(6, dtype=torch.float32).reshape(2, 3) + 10 * r
    x = block(R)
    ga = [torch.empty(3, 2).t() for _ in range(N)] if R == 0 else None
    dist.gather(x, ga, dst=0)
    if R == 0:
        for r in range(N):
            same(ga[r], block(r), f"gather into a transposed view, block {r}")
    aa = [torch.empty(3, 2).t() for _ in range(N)]
    dist.all_gather(aa, x)
    for r in range(N):
        same(aa[r], block(r), f"all_gather into a transposed view, block {r}")
    sa = torch.empty(2, 3)
    dist.scatter(sa, [block(r).t().contiguous().t() for r in range(N)] if R == 0 else None, src=0)
    same(sa, block(R), "scatter from transposed views")


check_all_reduce()
check_random_floats()
check_rooted()
check_gathers()
check_strided_lists()
check_reduce_scatter()
check_all_to_all()
check_all_reduce_coalesced()
check_point_to_point()
check_nonblocking_point_to_point()
check_async_and_futures()
dist.destroy_process_group()
print(f"rank {R}: every collective agrees:", ", ".join(f"{v} {k}" for k, v in counted.items()))
