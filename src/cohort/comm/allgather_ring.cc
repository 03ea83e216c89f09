// Ring allgather: out is n blocks of in.count elements, block b being rank b's input.
//
// Rank r copies its input into block r, then for steps s = 0 .. n-2 sends block (r - s) to r + 1
// and receives block (r - s - 1) from r - 1 straight into out. Segment i of the pipeline is sent
// once segment i - K has arrived, since that is the data it forwards.
#include <cstring>

#include "cohort/comm/algorithms.h"

namespace cohort::comm {

void allgather_ring(OpContext& ctx, Buffer in, Buffer out) {
  const int n = ctx.size(), r = ctx.rank();
  const size_t m = in.count;
  if (m == 0) return;
  const size_t es = dtype_size(in.dtype);
  const size_t bytes = m * es;
  uint8_t* mine = out.byte_ptr() + static_cast<size_t>(r) * bytes;
  if (mine != in.data) std::memmove(mine, in.data, bytes);
  if (n == 1) return;
  const size_t seg = ctx.segment_elems();
  const size_t K = ceil_div(m, seg);
  const size_t steps = static_cast<size_t>(n - 1);
  auto at = [&](int block, size_t k) {
    size_t lo = k * seg, hi = std::min(lo + seg, m);
    return Segment{out.byte_ptr() + static_cast<size_t>(block) * bytes + lo * es, (hi - lo) * es};
  };
  SendPlan send{
      .peer = wrap(r + 1, n),
      .count = steps * K,
      .segment = [&](size_t i) { return at(wrap(r - static_cast<int>(i / K), n), i % K); },
      .lag = K};
  RecvPlan recv{
      .peer = wrap(r - 1, n),
      .count = steps * K,
      .segment = [&](size_t i) { return at(wrap(r - static_cast<int>(i / K) - 1, n), i % K); },
      .on_segment = {},
      .lag = kNoLag};
  ctx.run(&send, &recv);
}

}  // namespace cohort::comm
