// Ring allreduce (bandwidth-optimal: each rank sends and receives 2(n-1)/n of the buffer).
//
// The buffer is cut into n blocks. Rank r sends to r+1 and receives from r-1.
//   Reduce-scatter, steps s = 0 .. n-2: send block (r - s), receive block (r - s - 1) and reduce
//     it into the local copy. After n-1 steps rank r holds the full reduction of block r + 1
//     (divided by n here for Avg).
//   Allgather, steps s = 0 .. n-2: send block (r + 1 - s), receive block (r - s) straight into the
//     buffer: it is final, so no copy and no reduction.
// Every block is further cut into K segments of chunk_bytes, and the (step, segment) items go
// in RingOrder: rounds of ring_window segments, each round through all 2(n-1) steps. Step s of
// segment k may be sent once step s - 1 of segment k has been received and reduced, because that
// is exactly the data it forwards; so the ring runs as a pipeline of segments rather than in
// lock-step, each reduction overlaps the transfer of later segments, and a reduced segment goes
// out again a window later, from the CPU caches, instead of a whole block later, from memory.
// Received reduce-scatter segments are reduced into the buffer straight from where they arrive
// when the transport shows them in place (shared memory's ring: RecvPlan::fold); otherwise they
// land in one segment of scratch (cache-hot) and are reduced from there.
//
// Measured on loopback TCP, 2 cores, f32 sum, 256 KiB segments, median ms of the slowest rank,
// runs interleaved (`cohort bench allreduce --algo ring --ring-window W`), window 0 (a whole block
// per step) / 1 / 2 / 4:
//   2 ranks 16 MiB  10.4 / 8.4 / 8.8-9.2 / 9.0-9.3     64 MiB  41.2-41.7 / 32.7-32.8 / 35.6-36.6
//   4 ranks 16 MiB  30.2-31.7 / 27.6-27.9 / 27.3-31.3 / 28.2-30.0
//   2 and 4 ranks, 256 KiB to 4 MiB: window 1 as fast as 0 or faster (4 MiB: 2.0 against 2.3).
// With a window of 1 each segment goes around the whole ring before the next one starts, yet the
// pipeline does not drain: the next segment's first step needs nothing received, and every later
// step needs only what the left neighbour sent one item earlier.
#include "cohort/comm/algorithms.h"
#include "cohort/comm/reduce.h"

namespace cohort::comm {

void allreduce_ring(OpContext& ctx, Buffer buf, ReduceOp op) {
  const int n = ctx.size();
  ring_steps(ctx, buf, op, 0, 2 * (n - 1));
}

void ring_steps(OpContext& ctx, Buffer buf, ReduceOp op, int first, int count) {
  const int n = ctx.size(), r = ctx.rank();
  if (n == 1 || buf.count == 0 || count <= 0) return;
  const size_t es = dtype_size(buf.dtype);
  const size_t seg = ctx.segment_elems();
  const Blocks blocks{buf.count, static_cast<size_t>(n)};
  const size_t K = ceil_div(blocks.length(0), seg);  // block 0 is the longest
  uint8_t* scratch = ctx.scratch_bytes(seg * es);

  auto send_block = [&](int s) {
    return s < n - 1 ? wrap(r - s, n) : wrap(r + 1 - (s - n + 1), n);
  };
  auto recv_block = [&](int s) {
    return s < n - 1 ? wrap(r - s - 1, n) : wrap(r - (s - n + 1), n);
  };
  // Element range of segment k of block b (possibly empty: blocks differ by one element).
  auto range = [&](int b, size_t k, size_t* off) {
    size_t start = blocks.offset(static_cast<size_t>(b)),
           len = blocks.length(static_cast<size_t>(b));
    size_t lo = std::min(k * seg, len), hi = std::min(lo + seg, len);
    *off = start + lo;
    return hi - lo;
  };
  // Ring step and segment of item i of this run's order.
  const RingOrder order(static_cast<size_t>(count), K, ctx.ring_window);
  auto item = [&](size_t i, size_t* k) {
    size_t t;
    order.at(i, &t, k);
    return first + static_cast<int>(t);
  };

  SendPlan send{.peer = wrap(r + 1, n),
                .count = order.count(),
                .segment =
                    [&](size_t i) {
                      size_t k, off;
                      const int s = item(i, &k);
                      size_t len = range(send_block(s), k, &off);
                      return Segment{buf.byte_ptr() + off * es, len * es};
                    },
                .needs = [&](size_t i) { return order.needs(i); }};
  RecvPlan recv{.peer = wrap(r - 1, n),
                .count = order.count(),
                .segment =
                    [&](size_t i) {
                      size_t k, off;
                      const int s = item(i, &k);
                      size_t len = range(recv_block(s), k, &off);
                      if (s >= n - 1) return Segment{buf.byte_ptr() + off * es, len * es};
                      return Segment{scratch, len * es, /*fold=*/true};
                    },
                .on_segment =
                    [&](size_t i) {
                      size_t k, off;
                      const int s = item(i, &k);
                      if (op != ReduceOp::Avg || s != n - 2) return;
                      size_t len = range(recv_block(s), k, &off);
                      ctx.divide(buf.dtype, buf.byte_ptr() + off * es, len, n);
                    },
                .lag = kNoLag,
                .fold =
                    [&](size_t i, size_t at, const uint8_t* bytes, size_t nbytes) {
                      size_t k, off;
                      const int s = item(i, &k);
                      range(recv_block(s), k, &off);
                      uint8_t* dst = buf.byte_ptr() + off * es + at;
                      ctx.reduce(buf.dtype, op, dst, dst, bytes, nbytes / es);
                    }};
  ctx.run(&send, &recv);
}

}  // namespace cohort::comm
