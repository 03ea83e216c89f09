// Ring reduce-scatter: rank r ends with block r of the reduction of every rank's input (n blocks
// of out.count elements each). The input is left untouched.
//
// Steps s = 0 .. n-2: rank r sends block (r - s - 1) to r + 1 and receives block (r - s - 2) from
// r - 1, adding its own input block to it; the last step's block is r itself and lands in out.
// Step 0 sends straight from the input. Partial sums of the intermediate steps alternate between
// two accumulator blocks: step s writes acc[s % 2] while step s sends from acc[(s - 1) % 2]. As in
// the allreduce ring, blocks are pipelined in segments: segment i is sent once segment i - K has
// been received (its data), and received once segment i - K has been sent (its accumulator slot
// is free again).
#include <cstring>

#include "cohort/comm/algorithms.h"
#include "cohort/comm/reduce.h"

namespace cohort::comm {

void reduce_scatter_ring(OpContext& ctx, Buffer in, Buffer out, ReduceOp op) {
  const int n = ctx.size(), r = ctx.rank();
  const size_t m = out.count;
  if (m == 0) return;
  const size_t es = dtype_size(in.dtype);
  const size_t bytes = m * es;
  if (n == 1) {
    if (out.data != in.data) std::memmove(out.data, in.data, bytes);
    return;
  }
  const size_t seg = ctx.segment_elems();
  const size_t K = ceil_div(m, seg);
  const size_t steps = static_cast<size_t>(n - 1);
  // Layout of scratch: [receive segment][acc 0][acc 1].
  uint8_t* base = ctx.scratch_bytes(seg * es + (n > 2 ? 2 * bytes : 0));
  uint8_t* landing = base;
  uint8_t* acc[2] = {base + seg * es, base + seg * es + bytes};

  auto seg_of = [&](size_t k) {
    size_t lo = k * seg, hi = std::min(lo + seg, m);
    return std::make_pair(lo * es, (hi - lo) * es);
  };
  auto input_block = [&](int b) { return in.byte_ptr() + static_cast<size_t>(b) * bytes; };
  auto result_of = [&](size_t s) { return s + 1 == steps ? out.byte_ptr() : acc[s % 2]; };

  SendPlan send{.peer = wrap(r + 1, n),
                .count = steps * K,
                .segment =
                    [&](size_t i) {
                      size_t s = i / K;
                      auto [off, len] = seg_of(i % K);
                      uint8_t* src = s == 0 ? input_block(wrap(r - 1, n)) : acc[(s - 1) % 2];
                      return Segment{src + off, len};
                    },
                .lag = K};
  RecvPlan recv{.peer = wrap(r - 1, n),
                .count = steps * K,
                .segment =
                    [&](size_t i) {
                      return Segment{landing, seg_of(i % K).second, /*fold=*/true};
                    },
                .on_segment =
                    [&](size_t i) {
                      size_t s = i / K;
                      if (op != ReduceOp::Avg || s + 1 != steps) return;
                      auto [off, len] = seg_of(i % K);
                      ctx.divide(in.dtype, result_of(s) + off, len / es, n);
                    },
                .lag = K,
                .fold =
                    [&](size_t i, size_t at, const uint8_t* bytes, size_t nbytes) {
                      size_t s = i / K;
                      const size_t off = seg_of(i % K).first + at;
                      const int b = wrap(r - static_cast<int>(s) - 2, n);
                      ctx.reduce(in.dtype, op, result_of(s) + off, input_block(b) + off, bytes,
                                 nbytes / es);
                    }};
  ctx.run(&send, &recv);
}

}  // namespace cohort::comm
