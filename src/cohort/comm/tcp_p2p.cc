// A rank's sends and recvs (torch.distributed's isend/irecv, batch_isend_irecv) may be issued in
// any order before they are waited on, as with Gloo: none of them may wait for good behind
// another. They run one at a time in the order issued, as long as none waits; one that waits
// (a recv whose message has not come, a send whose peer does not read) takes on the first queued
// operation of the other direction and runs it beside itself, full duplex: two ranks that each
// post a recv and then a send to the other, or each a large send first, or a ring where every rank
// sends to the next and receives from the previous, all complete. What it took on and had not
// begun when it was done goes back to the head of the queue. Only operations issued before the
// next collective are taken on: sends and recvs issued after a collective stay after it, as every
// peer expects them.
#include "cohort/comm/tcp_communicator.h"

namespace cohort::comm {

bool TcpCommunicator::take_partner(const Op& op, Op& other) {
  std::lock_guard lk(mu_);
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    if (it->id.kind != OpKind::PointToPoint) return false;
    if (it->sends != op.sends) {
      other = std::move(*it);
      queue_.erase(it);
      return true;
    }
  }
  return false;
}

void TcpCommunicator::execute_message(Op& op) {
  OpContext ctx = context(op, Deadline::after(op.timeout));
  Op other;            // the queued operation taken on beside op, once `taken`
  bool taken = false;  // and not finished yet
  // While op waits alone: the first queued operation of the other direction (a recv whose
  // message came before it was issued ends at once, and the next one is looked for).
  auto join = [&]() -> const Message* {
    while (!taken && take_partner(op, other)) {
      taken = true;
      if (other.sends || !take_stashed(ctx, other.message)) return &other.message;
      other.work->finish();
      taken = false;
    }
    return nullptr;
  };
  try {
    if (!op.sends && take_stashed(ctx, op.message)) {
      op.work->finish();
      return;
    }
    const bool all = run_message(ctx, op.message, op.sends, join);
    if (taken && !all) {
      // Not begun: back to the head of the queue, where it was (and runs next).
      other.hand_off_at = {};
      std::lock_guard lk(mu_);
      queue_.push_front(std::move(other));
      taken = false;
    }
  } catch (...) {
    // Told as the operation that waited on the peer the error names.
    const Op* named = &op;
    int peer = -1;
    try {
      throw;
    } catch (const StallError& e) {
      peer = e.peer();
    } catch (const PeerLostError& e) {
      peer = e.rank();
    } catch (...) {
    }
    if (taken && peer >= 0 && other.peer == peer && op.peer != peer) named = &other;
    const std::exception_ptr err = fail(*named, std::current_exception());
    op.work->fail(err);
    if (taken) other.work->fail(err);
    return;
  }
  op.work->finish();
  if (taken) other.work->finish();
}

}  // namespace cohort::comm
