// Ring allreduce (bandwidth-optimal: each rank sends and receives 2(n-1)/n of the buffer).
//
// The buffer is cut into n blocks. Rank r sends to r+1 and receives from r-1.
//   Reduce-scatter, steps s = 0 .. n-2: send block (r - s), receive block (r - s - 1) and reduce
//     it into the local copy. After n-1 steps rank r holds the full reduction of block r + 1
//     (divided by n here for Avg).
//   Allgather, steps s = 0 .. n-2: send block (r + 1 - s), receive block (r - s) straight into the
//     buffer: it is final, so no copy and no reduction.
// Every block is further cut into segments of chunk_bytes, numbered globally i = step * K + k
// (K segments per block). Segment i may be sent once segment i - K has been received and
// reduced, because that is exactly the data it forwards; so the ring runs as a pipeline of
// segments rather than in lock-step, and each reduction overlaps the transfer of later segments.
// Received reduce-scatter segments land in one segment of scratch (cache-hot) and are reduced from
// there into the buffer.
#include "cohort/comm/algorithms.h"
#include "cohort/comm/reduce.h"

namespace cohort::comm {

void allreduce_ring(OpContext& ctx, Buffer buf, ReduceOp op) {
  const int n = ctx.size(), r = ctx.rank();
  if (n == 1 || buf.count == 0) return;
  const size_t es = dtype_size(buf.dtype);
  const size_t seg = ctx.segment_elems();
  const Blocks blocks{buf.count, static_cast<size_t>(n)};
  const size_t K = ceil_div(blocks.length(0), seg);  // block 0 is the longest
  const int steps = 2 * (n - 1);
  uint8_t* scratch = ctx.scratch_bytes(seg * es);

  auto send_block = [&](int s) { return s < n - 1 ? wrap(r - s, n) : wrap(r + 1 - (s - n + 1), n); };
  auto recv_block = [&](int s) { return s < n - 1 ? wrap(r - s - 1, n) : wrap(r - (s - n + 1), n); };
  // Element range of segment k of block b (possibly empty: blocks differ by one element).
  auto range = [&](int b, size_t k, size_t* off) {
    size_t start = blocks.offset(static_cast<size_t>(b)), len = blocks.length(static_cast<size_t>(b));
    size_t lo = std::min(k * seg, len), hi = std::min(lo + seg, len);
    *off = start + lo;
    return hi - lo;
  };

  SendPlan send{.peer = wrap(r + 1, n),
                .count = static_cast<size_t>(steps) * K,
                .segment =
                    [&](size_t i) {
                      size_t off;
                      size_t len = range(send_block(static_cast<int>(i / K)), i % K, &off);
                      return Segment{buf.byte_ptr() + off * es, len * es};
                    },
                .lag = K};
  RecvPlan recv{.peer = wrap(r - 1, n),
                .count = static_cast<size_t>(steps) * K,
                .segment =
                    [&](size_t i) {
                      int s = static_cast<int>(i / K);
                      size_t off;
                      size_t len = range(recv_block(s), i % K, &off);
                      return Segment{s < n - 1 ? scratch : buf.byte_ptr() + off * es, len * es};
                    },
                .on_segment =
                    [&](size_t i) {
                      int s = static_cast<int>(i / K);
                      if (s >= n - 1) return;  // allgather: already in place
                      size_t off;
                      size_t len = range(recv_block(s), i % K, &off);
                      uint8_t* dst = buf.byte_ptr() + off * es;
                      reduce(buf.dtype, op, dst, dst, scratch, len);
                      if (op == ReduceOp::Avg && s == n - 2) divide(buf.dtype, dst, len, n);
                    },
                .lag = kNoLag};
  ctx.run(&send, &recv);
}

}  // namespace cohort::comm
