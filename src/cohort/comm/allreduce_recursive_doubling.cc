// Recursive-doubling allreduce: log2(n) full-buffer exchanges, the fewest round trips of any
// schedule, at the price of moving the whole buffer at every step (log2(n) times the buffer per
// rank, against the ring's 2(n-1)/n). So it is the algorithm for latency-bound small messages.
//
// Let p be the largest power of two <= n and e = n - p.
//   Fold (only if e > 0): among the first 2e ranks, each even rank sends its whole buffer to the
//     odd rank above it, which reduces it in; the even ranks then sit out. The p remaining ranks
//     take virtual ranks v = 0 .. p-1 (odd rank r < 2e -> r / 2, rank r >= 2e -> r - e).
//   Steps d = 1, 2, 4, .. < p: rank v swaps its whole buffer with v ^ d and reduces the two.
//     Before step d every rank holds the reduction over its aligned group of d virtual ranks;
//     after it, over the group of 2d.
//   Unfold: each odd rank r < 2e sends the result to rank r - 1.
//
// Bitwise identical results on every rank (DDP keeps replicas in sync by relying on it): both
// partners of a step compute reduce(lower, higher), the operands in the same order whichever side
// computes, with the same kernel, so they produce the same bits (this matters beyond Sum: Max and
// Min of +0 and -0 or of NaNs depend on the operand order). By induction every rank of a group
// holds the same bytes before each step, so all p ranks end with the same bytes; Avg divides those
// same bytes by n everywhere, and the folded ranks receive a copy.
//
// Each segment is reduced into the buffer once this rank has sent that segment (apply lag 0), since
// the reduction overwrites it: straight from where it arrives when the segment starts to arrive
// after that (RecvPlan::fold), else from scratch, where it is received at once. Receiving is
// never held back by sending: both partners of a step send at once, and a segment larger than
// what their pair buffers would otherwise leave each waiting for the other to read.
#include "cohort/comm/algorithms.h"
#include "cohort/comm/reduce.h"

namespace cohort::comm {

RecvPlan fold_whole(OpContext& ctx, Buffer buf, const SegmentedRange& whole, uint8_t* scratch,
                    ReduceOp op, int peer, bool mine_first) {
  const size_t es = dtype_size(buf.dtype);
  return RecvPlan{.peer = peer,
                  .count = whole.count(),
                  .segment =
                      [whole, scratch, base = buf.byte_ptr()](size_t i) {
                        Segment s = whole.at(i);
                        return Segment{scratch + (s.data - base), s.bytes, /*fold=*/true};
                      },
                  .fold =
                      [&ctx, whole, es, dtype = buf.dtype, op, mine_first](
                          size_t i, size_t at, const uint8_t* theirs, size_t n) {
                        uint8_t* mine = whole.at(i).data + at;
                        ctx.reduce(dtype, op, mine, mine_first ? mine : theirs,
                                   mine_first ? theirs : mine, n / es);
                      }};
}

void allreduce_recursive_doubling(OpContext& ctx, Buffer buf, ReduceOp op) {
  const int n = ctx.size(), r = ctx.rank();
  if (n == 1 || buf.count == 0) return;
  const SegmentedRange whole{buf.byte_ptr(), dtype_size(buf.dtype), 0, buf.count,
                             ctx.segment_elems()};
  uint8_t* scratch = ctx.scratch_bytes(buf.count * dtype_size(buf.dtype));
  auto send_whole = [&](int peer) {
    SendPlan send{
        .peer = peer, .count = whole.count(), .segment = [&](size_t i) { return whole.at(i); }};
    ctx.run(&send, nullptr);
  };
  auto recv_whole = [&](int peer) {
    RecvPlan recv{
        .peer = peer, .count = whole.count(), .segment = [&](size_t i) { return whole.at(i); }};
    ctx.run(nullptr, &recv);
  };
  // Reduces the buffer of `peer` (the rank below) into this one.
  auto fold_in = [&](int peer) {
    RecvPlan recv = fold_whole(ctx, buf, whole, scratch, op, peer, /*mine_first=*/false);
    ctx.run(nullptr, &recv);
  };
  // Swaps the buffer with `peer` and reduces: the lower rank's data is always the first operand.
  auto swap_reduce = [&](int peer, bool mine_first) {
    SendPlan send{
        .peer = peer, .count = whole.count(), .segment = [&](size_t i) { return whole.at(i); }};
    RecvPlan recv = fold_whole(ctx, buf, whole, scratch, op, peer, mine_first);
    recv.apply_lag = 0;
    ctx.run(&send, &recv);
  };

  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int extra = n - p;
  auto real_rank = [&](int v) { return v < extra ? 2 * v + 1 : v + extra; };

  int v = -1;
  if (r < 2 * extra) {
    if (r % 2 == 0) {
      send_whole(r + 1);
    } else {
      fold_in(r - 1);
      v = r / 2;
    }
  } else {
    v = r - extra;
  }

  if (v >= 0) {
    for (int d = 1; d < p; d *= 2) swap_reduce(real_rank(v ^ d), (v & d) == 0);
    if (op == ReduceOp::Avg) ctx.divide(buf.dtype, buf.byte_ptr(), buf.count, n);
  }

  if (r < 2 * extra) {
    if (r % 2 == 1) {
      send_whole(r - 1);
    } else {
      recv_whole(r + 1);
    }
  }
}

}  // namespace cohort::comm
