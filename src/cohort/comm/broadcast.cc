// Broadcast from a root. Ranks are renumbered v = (r - root) mod n so the root is v = 0.
//   Small messages (<= kTreeBytes): binomial tree, log2(n) hops. Rank v receives the whole
//     message from v - lowbit(v) and then forwards it to v + d for d = lowbit(v)/2, ..., 1 (the
//     root: every power of two below n), largest subtree first.
//   Large messages: a pipelined chain v -> v + 1, in chunk_bytes segments; each rank forwards a
//     segment as soon as it has it, so the time is about one message time plus n - 2 segments.
#include "cohort/comm/algorithms.h"

namespace cohort::comm {
namespace {

constexpr size_t kTreeBytes = 64 << 10;

}  // namespace

void broadcast(OpContext& ctx, Buffer buf, int root) {
  const int n = ctx.size();
  if (n == 1 || buf.count == 0) return;
  const int v = wrap(ctx.rank() - root, n);
  auto real_rank = [&](int x) { return wrap(x + root, n); };
  const SegmentedRange all{buf.byte_ptr(), dtype_size(buf.dtype), 0, buf.count,
                           ctx.segment_elems()};
  auto segment = [&](size_t i) { return all.at(i); };

  if (buf.bytes() <= kTreeBytes) {
    int low = 1;  // lowbit(v), or the first power of two >= n for the root
    if (v == 0) {
      while (low < n) low *= 2;
    } else {
      while ((v & low) == 0) low *= 2;
      RecvPlan recv{.peer = real_rank(v - low), .count = all.count(), .segment = segment};
      ctx.run(nullptr, &recv);
    }
    for (int d = low / 2; d >= 1; d /= 2) {
      if (v + d >= n) continue;
      SendPlan send{.peer = real_rank(v + d), .count = all.count(), .segment = segment};
      ctx.run(&send, nullptr);
    }
    return;
  }

  SendPlan send{.peer = real_rank(v + 1),
                .count = all.count(),
                .segment = segment,
                .lag = v == 0 ? kNoLag : 0};
  RecvPlan recv{.peer = real_rank(v - 1), .count = all.count(), .segment = segment};
  ctx.run(v + 1 < n ? &send : nullptr, v > 0 ? &recv : nullptr);
}

}  // namespace cohort::comm
