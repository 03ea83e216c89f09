// send/recv: one message, matched on the receiving side by source and tag. A message whose recv
// has not been issued yet (another tag, or it arrived during a collective) is kept in the
// connection's stash until that recv comes; a recv first looks there. A send and a recv run
// together, full duplex, so that neither of a rank's waits behind the other (tcp_p2p.cc pairs
// them).
#include <cstring>

#include "cohort/comm/algorithms.h"

namespace cohort::comm {

bool take_stashed(OpContext& ctx, const Message& recv) {
  const Buffer& buf = recv.buf;
  auto& stash = ctx.mesh.stash(ctx.mesh_rank(recv.peer));
  for (auto it = stash.begin(); it != stash.end(); ++it) {
    if (it->tag != recv.tag) continue;
    const std::string what =
        "rank " + std::to_string(recv.peer) + " sent a message with tag " + std::to_string(it->tag);
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
    return true;
  }
  return false;
}

bool run_message(OpContext& ctx, const Message& m, bool sends,
                 const std::function<const Message*()>& join) {
  // A plan and an id for a message; the plans' segments read the message they were made for.
  struct Planned {
    OpId id;
    SendPlan send;
    RecvPlan recv;
  };
  auto plan = [&](Planned& p, const Message& msg, bool is_send) {
    p.id = ctx.id;
    p.id.dtype = msg.buf.dtype;
    p.id.tag = msg.tag;
    auto segment = [&msg](size_t) { return Segment{msg.buf.byte_ptr(), msg.buf.bytes()}; };
    if (is_send) {
      p.send = SendPlan{.peer = ctx.mesh_rank(msg.peer), .count = 1, .segment = segment};
    } else {
      p.recv = RecvPlan{.peer = ctx.mesh_rank(msg.peer), .count = 1, .segment = segment};
    }
  };
  Planned mine, joined;
  plan(mine, m, sends);
  Join offer;
  if (join) {
    offer = [&](bool want_send) -> JoinOffer {
      const Message* other = join();
      if (!other) return {};
      plan(joined, *other, want_send);
      return want_send ? JoinOffer{.send = &joined.send, .id = &joined.id}
                       : JoinOffer{.recv = &joined.recv, .id = &joined.id};
    };
  }
  return comm::exchange_messages(ctx.mesh, ctx.counters, mine.id, sends ? &mine.send : nullptr,
                                 mine.id, sends ? nullptr : &mine.recv, ctx.deadline, ctx.spin,
                                 offer);
}

}  // namespace cohort::comm
