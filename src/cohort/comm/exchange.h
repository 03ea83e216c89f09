// The data engine under every algorithm: moves a sequence of segments to one peer while receiving
// a sequence of segments from another (or the same) peer, full duplex, on non-blocking sockets
// driven by poll(2). Each segment goes on the wire as a WireHeader plus its payload (one sendmsg),
// and the receiver checks the header before the payload lands anywhere.
//
// Pipelining: the send of segment i may be gated on the receipt of segment i - send_lag (a ring
// forwards what it just reduced), and the receipt of segment i on the send of segment
// i - recv_lag (so a buffer is not overwritten while it is still being sent). on_segment runs as
// soon as a segment has arrived, while the kernel keeps moving the next ones through the socket
// buffers: that is where reductions overlap the transfers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>

#include "cohort/base/clock.h"
#include "cohort/base/dtype.h"
#include "cohort/base/error.h"
#include "cohort/comm/mesh.h"
#include "cohort/comm/wire.h"

namespace cohort::comm {

inline constexpr size_t kNoLag = std::numeric_limits<size_t>::max();

struct Segment {
  uint8_t* data = nullptr;
  size_t bytes = 0;
  // Receiving only: the segment's bytes are not wanted at `data` but handed to RecvPlan::fold,
  // which combines them into where they belong. `data` is still the segment's own memory of
  // `bytes`, where they wait whenever they cannot be folded straight from the transport.
  bool fold = false;
};

struct SendPlan {
  int peer = -1;
  size_t count = 0;                             // number of segments
  std::function<Segment(size_t)> segment = {};  // the bytes of segment i
  size_t lag = kNoLag;                          // segment i waits for received segment i - lag
  // When set, replaces lag: segment i waits until needs(i) segments have been received.
  std::function<size_t(size_t)> needs = {};
};

struct RecvPlan {
  int peer = -1;
  size_t count = 0;
  std::function<Segment(size_t)> segment = {};  // where segment i lands (must have its exact size)
  std::function<void(size_t)> on_segment = {};  // after segment i has arrived (may be empty)
  size_t lag = kNoLag;                          // segment i waits for sent segment i - lag
  // on_segment(i) waits for sent segment i - apply_lag, while segment i itself is received at
  // once (into memory of its own, which the send does not read): unlike `lag`, neither side ever
  // stops reading because it has not finished sending, so a segment larger than what the pair
  // buffers cannot leave both ranks waiting for the other to read. Sends gated on received
  // segments (SendPlan::lag, needs) count only segments whose on_segment has run.
  size_t apply_lag = kNoLag;
  // For a segment marked `fold`: combines the `n` bytes at `bytes`, bytes [offset, offset + n) of
  // segment i, into their destination. It sees every byte of the segment once, in order, in
  // whole elements of the operation's type, and all of them before on_segment(i) runs. Where the
  // transport shows arrived bytes in place (shared memory: Pair::peek) and nothing holds the
  // segment back (its apply_lag is met when it starts to arrive, frames carry no integrity tag),
  // `bytes` points into the transport and fold runs while the segment arrives: the bytes are read
  // once, where they landed, instead of copied to `data` first (for segments large enough to
  // gain: exchange()'s fold_bytes). Otherwise the segment lands at `data` and fold runs once for
  // all of it, when on_segment(i) would.
  std::function<void(size_t i, size_t offset, const uint8_t* bytes, size_t n)> fold = {};
};

// What the headers of this operation must say.
struct OpId {
  OpKind kind = OpKind::Allreduce;
  uint64_t seq = 0;
  DType dtype = DType::F32;
  uint32_t tag = 0;  // send/recv: the message tag; collectives: the wire format (0 for most)
  // Collectives skip empty segments (both sides know they are empty); a send/recv message is
  // always transmitted, even when empty.
  bool skip_empty = true;
};

// Byte counters shared with the communicator's stats().
struct Counters {
  std::atomic<uint64_t> sent{0};
  std::atomic<uint64_t> received{0};
};

// How long a wait polls its pairs without sleeping before it sleeps in poll(2), by the transport
// of the pairs it waits on (the longest of theirs applies). Spinning on a TCP pair saves the
// receiver a thread wake-up; on a shared-memory pair it also saves the sender the doorbell write.
struct Spin {
  std::chrono::nanoseconds tcp{0};
  std::chrono::nanoseconds shm{0};
  // Each poll of the spin gives the CPU away first (sched_yield): for a host with more ranks than
  // CPUs, where the rank this one waits for may need this CPU to send.
  bool yield = false;
};

// The deadline passed while this rank waited for `peer`.
class StallError : public TimeoutError {
 public:
  StallError(int peer, std::string waiting_for)
      : TimeoutError(waiting_for), peer_(peer), waiting_for_(std::move(waiting_for)) {}
  int peer() const { return peer_; }
  const std::string& waiting_for() const { return waiting_for_; }

 private:
  int peer_;
  std::string waiting_for_;
};

// Runs both plans to completion (either may be null). Throws StallError at the deadline,
// PeerLostError naming the peer whose connection failed, ProtocolError on a header that does not
// match `id`. With a positive `spin`, a wait for the pairs polls them without sleeping for up
// to that long before it sleeps in poll(2): a latency-bound exchange then sees its peer's data the
// moment it lands instead of a thread wake-up later. Only for a rank with a CPU of its own.
// Segments to fold (RecvPlan::fold) of at least `fold_bytes` are folded straight from a pair
// that shows its bytes in place (0: none are; CommConfig::shm_fold_bytes).
void exchange(Mesh& mesh, Counters& counters, const OpId& id, SendPlan* send, RecvPlan* recv,
              Deadline deadline, Spin spin = {}, size_t fold_bytes = 0);

// What exchange_messages may take on while the one side it was given waits alone: a send (to
// run beside a recv) or a recv (beside a send), with its id; plan and id must outlive the call.
struct JoinOffer {
  SendPlan* send = nullptr;
  RecvPlan* recv = nullptr;
  const OpId* id = nullptr;
};
// Asked with true for a send, false for a recv; an empty offer: nothing (yet).
using Join = std::function<JoinOffer(bool want_send)>;

// A send or a recv of a point-to-point message (or both, each with its own id: tag and type).
// With `join`, one that waits alone asks it every few milliseconds for a message of the other
// direction and runs that beside it, so that neither of two ranks that each wait to send to (or
// receive from) the other waits for the other's next operation. Once the side it was given is
// done, a joined side that has not begun (nothing of it sent or received) is left: false; true
// when everything it ran is done. Throws as exchange() does.
bool exchange_messages(Mesh& mesh, Counters& counters, const OpId& send_id, SendPlan* send,
                       const OpId& recv_id, RecvPlan* recv, Deadline deadline, Spin spin = {},
                       const Join& join = {});

}  // namespace cohort::comm
