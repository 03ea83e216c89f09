// Barrier by dissemination: in round k = 1, 2, 4, ... (< n) rank r sends a token to r + k and
// waits for one from r - k. After ceil(log2 n) rounds every rank has heard, directly or through
// others, from every rank, so none leaves before all have arrived.
#include "cohort/comm/algorithms.h"

namespace cohort::comm {

void barrier(OpContext& ctx) {
  const int n = ctx.size(), r = ctx.rank();
  uint64_t token = ctx.id.seq, got = 0;
  for (int k = 1; k < n; k *= 2) {
    SendPlan send{.peer = wrap(r + k, n), .count = 1, .segment = [&](size_t) {
                    return Segment{reinterpret_cast<uint8_t*>(&token), 8};
                  }};
    RecvPlan recv{.peer = wrap(r - k, n), .count = 1, .segment = [&](size_t) {
                    return Segment{reinterpret_cast<uint8_t*>(&got), 8};
                  }};
    ctx.run(&send, &recv);
  }
}

}  // namespace cohort::comm
