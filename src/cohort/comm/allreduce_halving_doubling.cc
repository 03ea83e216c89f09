// Halving-doubling allreduce (Rabenseifner): log2(n) steps each way instead of the ring's n-1,
// with the same bandwidth term, so it wins for small messages and for power-of-two worlds.
//
// Let p be the largest power of two <= n and e = n - p.
//   Fold (only if e > 0): among the first 2e ranks, each even rank sends its whole buffer to the
//     odd rank above it, which reduces it in; the even ranks then sit out. The p remaining ranks
//     take virtual ranks v = 0 .. p-1 (odd rank r < 2e -> r / 2, rank r >= 2e -> r - e).
//   Reduce-scatter by recursive vector halving, distance doubling: the buffer is cut into p
//     blocks; at the step with distance d = 1, 2, 4, ... rank v pairs with v ^ d, the two split
//     the block range they share, each sends the half it gives up and reduces the half it keeps.
//     After log2(p) steps each rank owns one fully reduced block.
//   Allgather by recursive vector doubling, distance halving: the same steps in reverse; partners
//     swap their owned ranges, received straight into the buffer.
//   Unfold: each odd rank r < 2e sends the result to rank r - 1.
// Transfers are cut into chunk_bytes segments, and each received segment is reduced as soon as
// it arrives while the next ones are in flight.
#include "cohort/comm/algorithms.h"
#include "cohort/comm/reduce.h"

namespace cohort::comm {
namespace {

// Sends `out` to and receives `in` from `peer` at the same time; reduces `in` into the buffer
// segment by segment when `op` is given (from where it arrives, or through scratch:
// RecvPlan::fold), else receives it in place.
void swap_ranges(OpContext& ctx, int peer, const SegmentedRange& out, const SegmentedRange& in,
                 DType dt, const ReduceOp* op, uint8_t* scratch) {
  SendPlan send{.peer = peer, .count = out.count(), .segment = [&](size_t i) { return out.at(i); }};
  RecvPlan recv{.peer = peer,
                .count = in.count(),
                .segment =
                    [&](size_t i) {
                      Segment s = in.at(i);
                      if (op) s = Segment{scratch, s.bytes, /*fold=*/true};
                      return s;
                    },
                .fold =
                    [&](size_t i, size_t at, const uint8_t* bytes, size_t n) {
                      uint8_t* dst = in.at(i).data + at;
                      ctx.reduce(dt, *op, dst, dst, bytes, n / in.elem_size);
                    }};
  ctx.run(out.count() ? &send : nullptr, in.count() ? &recv : nullptr);
}

}  // namespace

void allreduce_halving_doubling(OpContext& ctx, Buffer buf, ReduceOp op) {
  const int n = ctx.size(), r = ctx.rank();
  if (n == 1 || buf.count == 0) return;
  const size_t es = dtype_size(buf.dtype);
  const size_t seg = ctx.segment_elems();
  uint8_t* scratch = ctx.scratch_bytes(seg * es);
  auto range = [&](size_t off, size_t len) {
    return SegmentedRange{buf.byte_ptr(), es, off, len, seg};
  };
  const SegmentedRange whole = range(0, buf.count);
  const SegmentedRange none = range(0, 0);

  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int extra = n - p;
  auto real_rank = [&](int v) { return v < extra ? 2 * v + 1 : v + extra; };

  int v = -1;
  if (r < 2 * extra) {
    if (r % 2 == 0) {
      swap_ranges(ctx, r + 1, whole, none, buf.dtype, nullptr, scratch);
    } else {
      swap_ranges(ctx, r - 1, none, whole, buf.dtype, &op, scratch);
      v = r / 2;
    }
  } else {
    v = r - extra;
  }

  if (v >= 0) {
    const Blocks blocks{buf.count, static_cast<size_t>(p)};
    auto elems = [&](int lo, int hi) {
      return range(blocks.offset(static_cast<size_t>(lo)),
                   blocks.offset(static_cast<size_t>(hi)) - blocks.offset(static_cast<size_t>(lo)));
    };
    // Block range [lo, hi) owned before each halving step, for the allgather to retrace.
    std::vector<std::pair<int, int>> before;
    int lo = 0, hi = p;
    for (int d = 1; d < p; d *= 2) {
      before.emplace_back(lo, hi);
      const int mid = (lo + hi) / 2;
      const bool lower = (v & d) == 0;
      const int klo = lower ? lo : mid, khi = lower ? mid : hi;
      const int glo = lower ? mid : lo, ghi = lower ? hi : mid;
      swap_ranges(ctx, real_rank(v ^ d), elems(glo, ghi), elems(klo, khi), buf.dtype, &op, scratch);
      lo = klo;
      hi = khi;
    }
    if (op == ReduceOp::Avg) {
      SegmentedRange mine = elems(lo, hi);
      ctx.divide(buf.dtype, buf.byte_ptr() + mine.off * es, mine.len, n);
    }
    for (int step = static_cast<int>(before.size()) - 1; step >= 0; --step) {
      const int d = 1 << step;
      auto [plo, phi] = before[static_cast<size_t>(step)];
      const int mid = (plo + phi) / 2;
      const bool lower = (v & d) == 0;
      const int olo = lower ? mid : plo, ohi = lower ? phi : mid;  // the partner's half
      swap_ranges(ctx, real_rank(v ^ d), elems(lo, hi), elems(olo, ohi), buf.dtype, nullptr,
                  scratch);
      lo = plo;
      hi = phi;
    }
  }

  if (r < 2 * extra) {
    if (r % 2 == 1) {
      swap_ranges(ctx, r - 1, whole, none, buf.dtype, nullptr, scratch);
    } else {
      swap_ranges(ctx, r + 1, none, whole, buf.dtype, nullptr, scratch);
    }
  }
}

}  // namespace cohort::comm
