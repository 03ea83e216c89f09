// send/recv: one message, matched on the receiving side by source and tag. A message whose recv
// has not been issued yet (another tag, or it arrived during a collective) is kept in the
// connection's stash until that recv comes; a recv first looks there.
#include <cstring>

#include "cohort/comm/algorithms.h"

namespace cohort::comm {

void send_message(OpContext& ctx, Buffer buf, int dst) {
  SendPlan send{.peer = dst, .count = 1, .segment = [&](size_t) {
                  return Segment{buf.byte_ptr(), buf.bytes()};
                }};
  ctx.run(&send, nullptr);
}

void recv_message(OpContext& ctx, Buffer buf, int src) {
  auto& stash = ctx.mesh.stash(ctx.mesh_rank(src));
  for (auto it = stash.begin(); it != stash.end(); ++it) {
    if (it->tag != ctx.id.tag) continue;
    const std::string what =
        "rank " + std::to_string(src) + " sent a message with tag " + std::to_string(it->tag);
    if (it->dtype != static_cast<uint8_t>(buf.dtype)) {
      throw ProtocolError(what + " of " + std::string(dtype_name(static_cast<DType>(it->dtype))) +
                          " but the recv expects " + std::string(dtype_name(buf.dtype)));
    }
    if (it->payload.size() != buf.bytes()) {
      throw ProtocolError(what + " of " + std::to_string(it->payload.size()) +
                          " bytes but the recv expects " + std::to_string(buf.bytes()));
    }
    if (buf.bytes()) std::memcpy(buf.data, it->payload.data(), buf.bytes());
    stash.erase(it);
    return;
  }
  RecvPlan recv{.peer = src, .count = 1, .segment = [&](size_t) {
                  return Segment{buf.byte_ptr(), buf.bytes()};
                }};
  ctx.run(nullptr, &recv);
}

}  // namespace cohort::comm
