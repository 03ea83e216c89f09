#include "cohort/comm/exchange.h"

#include <poll.h>
#include <sched.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "cohort/comm/flight_recorder.h"
#include "cohort/comm/frame_seal.h"

namespace cohort::comm {
namespace {

std::string rank_str(int r) {
  return "rank " + std::to_string(r);
}

using transport::Direction;
using transport::Pair;

[[noreturn]] void lost(int peer, const OpId& id, const std::exception& e) {
  throw PeerLostError(peer, describe(id.kind, id.seq, id.tag) + ": connection to " +
                                rank_str(peer) + " lost (" + e.what() + ")");
}

struct SendState {
  SendPlan* plan = nullptr;
  Pair* pair = nullptr;
  FrameMac* mac = nullptr;  // the pair's seal, when frames carry tags (frame_seal.h)
  size_t i = 0;             // segments finished
  bool active = false;
  bool blocked = false;
  WireHeader hdr;
  Segment seg;
  FrameTag tag{};
  size_t off = 0;  // bytes of header + payload (+ tag) sent

  bool done() const { return !plan || i == plan->count; }
  size_t tag_bytes() const { return mac ? mac->tag_bytes() : 0; }
};

struct RecvState {
  // Tag and StashTag: the frame's tag, after a payload for the plan or for the stash.
  enum Phase { Idle, Header, Payload, Stash, Tag, StashTag };
  RecvPlan* plan = nullptr;
  Pair* pair = nullptr;
  FrameMac* mac = nullptr;
  size_t i = 0;        // segments received
  size_t applied = 0;  // segments whose on_segment has run (RecvPlan::apply_lag)
  // A segment marked fold that is folded as it arrives (RecvPlan::fold): `folded` of its `got`
  // bytes are. `streamed`: the last segment received that way, whose bytes are all folded.
  bool streaming = false;
  size_t folded = 0;
  size_t streamed = kNoLag;
  Phase phase = Idle;
  bool blocked = false;
  WireHeader hdr;
  size_t hdr_got = 0;
  Segment seg;
  size_t got = 0;
  StashedMessage stash;
  FrameTag tag{};
  size_t tag_got = 0;

  bool done() const { return !plan || applied == plan->count; }
};

class Engine {
 public:
  // `send_id` names the frames sent, `id` those received (the same operation's, except for a send
  // and a recv run together); `join` (optional, exchange_messages) is asked for the other side
  // while one side waits alone.
  Engine(Mesh& mesh, Counters& counters, const OpId& send_id, const OpId& id, SendPlan* send,
         RecvPlan* recv, Spin spin, size_t fold_bytes, Deadline deadline,
         const Join* join = nullptr)
      : mesh_(mesh),
        counters_(counters),
        sid_(&send_id),
        id_(&id),
        fold_bytes_(fold_bytes),
        spin_in_(spin),
        deadline_(deadline),
        join_(join && *join ? join : nullptr) {
    attach_send(send, &send_id);
    attach_recv(recv, &id);
    yield_ = spin.yield;
  }

  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  // A frame still being sent when the operation fails: its header, tag and payload may go away
  // with this engine and its caller.
  ~Engine() {
    if (s_.active && s_.pair) s_.pair->abandon_send();
  }

  void run(Deadline deadline) {
    for (;;) {
      bool progress = false;
      if (!s_.done()) progress |= pump_send();
      if (!r_.done()) {
        progress |= apply_received();
        progress |= pump_recv();
      }
      if (s_.done() && r_.done()) return;
      // The side started with is done and the one joined has not begun: left for later.
      if (joined_ && (joined_send_ ? r_.done() : s_.done()) && !joined_begun()) {
        left_joined_ = true;
        return;
      }
      if (!progress) wait(deadline);
    }
  }

 private:
  bool send_ready(size_t i) const {
    if (s_.plan->needs) return r_.applied >= s_.plan->needs(i);
    size_t lag = s_.plan->lag;
    return lag == kNoLag || i < lag || r_.applied > i - lag;
  }
  bool recv_ready(size_t i) const {
    size_t lag = r_.plan->lag;
    return lag == kNoLag || i < lag || s_.i > i - lag;
  }

  bool pump_send() {
    bool progress = false;
    SendPlan& p = *s_.plan;
    for (;;) {
      if (!s_.active) {
        while (s_.i < p.count && sid_->skip_empty && p.segment(s_.i).bytes == 0) {
          ++s_.i;
          progress = true;
        }
        if (s_.i == p.count || !send_ready(s_.i)) return progress;
        s_.seg = p.segment(s_.i);
        s_.hdr = WireHeader{};
        s_.hdr.kind = static_cast<uint8_t>(sid_->kind);
        s_.hdr.dtype = static_cast<uint8_t>(sid_->dtype);
        s_.hdr.tag = sid_->tag;
        s_.hdr.seq = sid_->seq;
        s_.hdr.bytes = s_.seg.bytes;
        s_.off = 0;
        s_.active = true;
        if (s_.mac) {
          s_.mac->begin(&s_.hdr, sizeof(WireHeader));
          s_.mac->update(s_.seg.data, s_.seg.bytes);
          s_.tag = s_.mac->finish();
        }
      }
      if (s_.blocked) return progress;
      // The frame is header | payload | tag; send what is left of it.
      const iovec parts[3] = {{&s_.hdr, sizeof(WireHeader)},
                              {s_.seg.data, s_.seg.bytes},
                              {s_.tag.data(), s_.tag_bytes()}};
      const size_t total = sizeof(WireHeader) + s_.seg.bytes + s_.tag_bytes();
      iovec iov[3];
      int n = 0;
      for (size_t k = 0, start = 0; k < 3; start += parts[k].iov_len, ++k) {
        const size_t end = start + parts[k].iov_len;
        if (end <= s_.off || parts[k].iov_len == 0) continue;
        const size_t skip = s_.off > start ? s_.off - start : 0;
        iov[n++] = {static_cast<uint8_t*>(parts[k].iov_base) + skip, parts[k].iov_len - skip};
      }
      size_t rc;
      try {
        // A point-to-point recv may be posted after this send ends; a collective's peer reads
        // while this rank sends.
        rc = s_.pair->send_some(iov, n,
                                sid_->kind == OpKind::PointToPoint
                                    ? transport::Delivery::Buffered
                                    : transport::Delivery::Rendezvous);
      } catch (const PeerLostError& e) {
        lost(p.peer, *sid_, e);
      }
      if (rc == 0) {
        s_.blocked = true;
        return progress;
      }
      counters_.sent.fetch_add(static_cast<uint64_t>(rc), std::memory_order_relaxed);
      s_.off += static_cast<size_t>(rc);
      progress = true;
      if (s_.off < total) {
        s_.blocked = true;  // a short write means the socket buffer is full
        return progress;
      }
      s_.active = false;
      ++s_.i;
    }
  }

  // Reads into [p, p + n); returns bytes read, 0 when the pair has nothing now.
  size_t read_some(int peer, void* p, size_t n) {
    size_t rc;
    try {
      rc = r_.pair->recv_some(p, n);
    } catch (const PeerLostError& e) {
      lost(peer, *id_, e);
    }
    counters_.received.fetch_add(rc, std::memory_order_relaxed);
    if (rc < n) r_.blocked = true;  // drained
    return rc;
  }

  // Checks a complete header against this operation and picks the next phase.
  void on_header() {
    const WireHeader& h = r_.hdr;
    const int peer = r_.plan->peer;
    // Only an error message needs it: a header that matches costs no string.
    auto here = [&] { return describe(id_->kind, id_->seq, id_->tag); };
    if (h.magic != kDataMagic) {
      char m[16];
      std::snprintf(m, sizeof(m), "%08x", h.magic);
      throw ProtocolError(rank_str(peer) +
                          " sent bytes that are not a Cohort data header (magic 0x" + m +
                          ") while this rank is in " + here());
    }
    const auto kind = static_cast<OpKind>(h.kind);
    if (kind == OpKind::PointToPoint && !(id_->kind == OpKind::PointToPoint && h.tag == id_->tag)) {
      // A message for a recv not issued yet: keep it for that recv, within the stash's bound.
      const uint64_t held = mesh_.stashed_bytes(peer);
      if (h.bytes > mesh_.stash_limit() || held + h.bytes > mesh_.stash_limit()) {
        throw ProtocolError(
            rank_str(peer) + " sent a message of " + std::to_string(h.bytes) + " bytes (tag " +
            std::to_string(h.tag) + ") before its recv was issued, while this rank is in " +
            here() + "; with the " + std::to_string(held) +
            " bytes of its messages already waiting for a recv that is over the limit of " +
            std::to_string(mesh_.stash_limit()) +
            " (CommConfig::p2p_stash_bytes): post the recv before the operation that waits on "
            "the sender");
      }
      r_.stash = StashedMessage{h.tag, h.dtype, std::vector<uint8_t>(h.bytes)};
      r_.got = 0;
      r_.phase = RecvState::Stash;
      if (r_.mac) r_.mac->begin(&h, sizeof(WireHeader));
      return;
    }
    if (kind != id_->kind || (kind != OpKind::PointToPoint && h.seq != id_->seq)) {
      throw ProtocolError(rank_str(peer) + " sent " + describe(kind, h.seq, h.tag) +
                          " but this rank is in " + here());
    }
    if (kind != OpKind::PointToPoint && h.tag != id_->tag) {
      throw ProtocolError(rank_str(peer) + " sent " + here() + " in wire format " +
                          std::to_string(h.tag) + " but this rank uses format " +
                          std::to_string(id_->tag) + " (do all ranks use the same compression?)");
    }
    if (h.dtype != static_cast<uint8_t>(id_->dtype)) {
      throw ProtocolError(rank_str(peer) + " sent " +
                          std::string(dtype_name(static_cast<DType>(h.dtype))) + " data in " +
                          here() + " but this rank's buffer is " +
                          std::string(dtype_name(id_->dtype)));
    }
    if (h.bytes != r_.seg.bytes) {
      throw ProtocolError(rank_str(peer) + " sent " + std::to_string(h.bytes) + " bytes in " +
                          here() + " where this rank expected " + std::to_string(r_.seg.bytes) +
                          " (do all ranks pass the same element counts?)");
    }
    r_.got = 0;
    r_.phase = RecvState::Payload;
    r_.folded = 0;
    r_.streaming = r_.seg.fold && fold_in_place();
    if (r_.mac) r_.mac->begin(&h, sizeof(WireHeader));
  }

  // Whether the segment now arriving may be folded straight from the pair (RecvPlan::fold): it is
  // large enough to gain, the pair shows its bytes in place, no tag must be checked first, every
  // earlier segment is applied, and this one's apply_lag is met.
  bool fold_in_place() const {
    return fold_bytes_ > 0 && r_.seg.bytes >= fold_bytes_ && !r_.mac && r_.pair->has_view() &&
           r_.applied == r_.i && apply_allowed(r_.i);
  }
  bool apply_allowed(size_t j) const {
    const size_t lag = r_.plan->apply_lag;
    return lag == kNoLag || j < lag || s_.i > j - lag;
  }

  // Folds the arriving segment's bytes: straight from the pair wherever it shows whole, aligned
  // elements in place, through the segment's own memory otherwise (an element split by the end
  // of the ring, bytes the pair copies, a frame that left the ring misaligned). True once every
  // byte has come.
  bool fold_arriving(bool& progress) {
    RecvPlan& p = *r_.plan;
    const size_t es = dtype_size(id_->dtype);
    while (r_.got < r_.seg.bytes) {
      if (r_.folded == r_.got) {
        const uint8_t* at = nullptr;
        size_t k;
        try {
          k = r_.pair->peek(&at);
        } catch (const PeerLostError& e) {
          lost(p.peer, *id_, e);
        }
        k = std::min(k, r_.seg.bytes - r_.got);
        k -= k % es;
        if (k > 0 && reinterpret_cast<uintptr_t>(at) % es == 0) {
          p.fold(r_.i, r_.got, at, k);
          r_.pair->consume(k);
          counters_.received.fetch_add(k, std::memory_order_relaxed);
          r_.got += k;
          r_.folded += k;
          progress = true;
          continue;
        }
      }
      const size_t k = read_some(p.peer, r_.seg.data + r_.got, r_.seg.bytes - r_.got);
      if (k == 0) return false;
      progress = true;
      r_.got += k;
      if (const size_t whole = (r_.got - r_.folded) / es * es; whole > 0) {
        p.fold(r_.i, r_.folded, r_.seg.data + r_.folded, whole);
        r_.folded += whole;
      }
    }
    return true;
  }

  // A frame's tag has arrived: it must be the one this rank computes for the frame's bytes and
  // its place in the stream, or nothing of it is used.
  void check_tag() {
    if (tags_equal(r_.tag, r_.mac->finish())) return;
    const int peer = r_.plan->peer;
    throw IntegrityError(describe(id_->kind, id_->seq, id_->tag) + ": data from " + rank_str(peer) +
                         " failed its integrity check (comm.integrity): it was changed, "
                         "injected, replayed or reordered on the way from " +
                         rank_str(peer) + " to this rank");
  }

  // Reads the frame's tag; true once it has arrived and matches.
  bool read_tag(bool& progress) {
    const size_t want = r_.mac->tag_bytes();
    while (r_.tag_got < want) {
      size_t k = read_some(r_.plan->peer, r_.tag.data() + r_.tag_got, want - r_.tag_got);
      if (k == 0) return false;
      progress = true;
      r_.tag_got += k;
    }
    check_tag();
    return true;
  }

  // The payload of the frame in phase `tag_phase` is complete: its tag is next when frames carry
  // one. True when the frame is complete.
  bool payload_done(RecvState::Phase tag_phase) {
    if (!r_.mac) return true;
    r_.tag_got = 0;
    r_.phase = tag_phase;
    return false;
  }

  void finish_segment() {
    if (r_.streaming) r_.streamed = r_.i;
    r_.streaming = false;
    ++r_.i;
    r_.phase = RecvState::Idle;
    apply_received();
  }

  // Runs on_segment for the received segments, in order, as far as apply_lag lets it.
  bool apply_received() {
    RecvPlan& p = *r_.plan;
    bool progress = false;
    while (r_.applied < r_.i) {
      const size_t j = r_.applied;
      if (!apply_allowed(j)) break;
      if (j == r_.streamed) {
        if (p.on_segment) p.on_segment(j);  // folded as it arrived, and not empty
      } else if (p.on_segment || p.fold) {
        const Segment seg = p.segment(j);
        if (!(id_->skip_empty && seg.bytes == 0)) {
          if (seg.fold) p.fold(j, 0, seg.data, seg.bytes);
          if (p.on_segment) p.on_segment(j);
        }
      }
      ++r_.applied;
      progress = true;
    }
    return progress;
  }

  bool pump_recv() {
    bool progress = false;
    RecvPlan& p = *r_.plan;
    for (;;) {
      if (r_.phase == RecvState::Idle) {
        while (r_.i < p.count && id_->skip_empty && p.segment(r_.i).bytes == 0) {
          ++r_.i;
          progress = true;
        }
        if (r_.i == p.count || !recv_ready(r_.i)) return progress;
        r_.seg = p.segment(r_.i);
        r_.hdr_got = 0;
        r_.phase = RecvState::Header;
      }
      if (r_.blocked) return progress;
      if (r_.phase == RecvState::Header) {
        size_t k = read_some(p.peer, reinterpret_cast<uint8_t*>(&r_.hdr) + r_.hdr_got,
                             sizeof(WireHeader) - r_.hdr_got);
        if (k == 0) return progress;
        progress = true;
        r_.hdr_got += k;
        if (r_.hdr_got < sizeof(WireHeader)) continue;
        on_header();
      }
      if (r_.phase == RecvState::Payload) {
        if (r_.streaming) {
          if (!fold_arriving(progress)) return progress;
        } else if (r_.got < r_.seg.bytes) {
          uint8_t* at = r_.seg.data + r_.got;
          size_t k = read_some(p.peer, at, r_.seg.bytes - r_.got);
          if (k == 0) return progress;
          progress = true;
          r_.got += k;
          if (r_.mac) r_.mac->update(at, k);  // while the bytes are in the caches
        }
        if (r_.got == r_.seg.bytes && payload_done(RecvState::Tag)) finish_segment();
        continue;
      }
      if (r_.phase == RecvState::Tag) {
        if (!read_tag(progress)) return progress;
        finish_segment();
        continue;
      }
      if (r_.phase == RecvState::Stash) {
        auto& buf = r_.stash.payload;
        if (r_.got < buf.size()) {
          uint8_t* at = buf.data() + r_.got;
          size_t k = read_some(p.peer, at, buf.size() - r_.got);
          if (k == 0) return progress;
          progress = true;
          r_.got += k;
          if (r_.mac) r_.mac->update(at, k);
        }
        if (r_.got == buf.size() && payload_done(RecvState::StashTag)) stash_message();
        continue;
      }
      if (r_.phase == RecvState::StashTag) {
        if (!read_tag(progress)) return progress;
        stash_message();
      }
    }
  }

  // A message for a later recv is complete: keep it, and go on reading for this operation.
  void stash_message() {
    mesh_.stash(r_.plan->peer).push_back(std::move(r_.stash));
    r_.hdr_got = 0;
    r_.phase = RecvState::Header;  // the segment we wanted is still to come
  }

  // Waits until the blocked side(s) may make progress: spins first (see exchange()), then sleeps
  // in poll(2) on what the pairs name, until the deadline.
  void wait(Deadline deadline) {
    const bool want_out = !s_.done() && s_.active && s_.blocked;
    const bool want_in = !r_.done() && r_.phase != RecvState::Idle && r_.blocked;
    if (!want_out && !want_in) {
      throw Error(describe(id_->kind, id_->seq, id_->tag) +
                  ": internal error: the schedule waits on itself");
    }
    pollfd fds[2] = {{-1, 0, 0}, {-1, 0, 0}};  // [0]: the send pair, [1]: the receive pair
    const auto t0 = std::chrono::steady_clock::now();
    auto watch = [&](bool arm) {
      bool out = want_out && s_.pair->watch(Direction::Send, arm, &fds[0]);
      bool in = want_in && r_.pair->watch(Direction::Recv, arm, &fds[1]);
      return std::make_pair(out, in);
    };
    // One clock read per poll: the spin ends at whichever comes first of its own length and the
    // deadline.
    const auto spin_end = std::min(t0 + spin_, deadline.at());
    for (; spin_.count() > 0;) {
      if (yield_) ::sched_yield();
      auto [out, in] = watch(false);
      if (!out && !in && (fds[0].fd >= 0 || fds[1].fd >= 0)) {
        const int rc = ::poll(fds, 2, 0);
        if (rc < 0 && errno != EINTR) throw SystemError("poll", errno);
        if (rc > 0) {
          out = want_out && s_.pair->woke(Direction::Send, fds[0].revents);
          in = want_in && r_.pair->woke(Direction::Recv, fds[1].revents);
        }
      }
      if (out || in) return ready(out, in, t0);
      if (std::chrono::steady_clock::now() >= spin_end) break;
    }
    for (;;) {
      auto [out, in] = watch(true);
      if (!out && !in) {
        int timeout_ms = deadline.poll_timeout_ms();
        if (may_join() && (timeout_ms < 0 || timeout_ms > kJoinPollMs)) timeout_ms = kJoinPollMs;
        const int rc = ::poll(fds, 2, timeout_ms);
        if (rc < 0 && errno != EINTR) throw SystemError("poll", errno);
      }
      // Every armed watch is answered, whatever woke the poll.
      out = (want_out && s_.pair->woke(Direction::Send, fds[0].revents)) || out;
      in = (want_in && r_.pair->woke(Direction::Recv, fds[1].revents)) || in;
      if (out || in) return ready(out, in, t0);
      if (may_join() && take_join()) return;
      if (deadline.expired()) {
        if (want_in) {
          throw StallError(r_.plan->peer, "waiting for data from " + rank_str(r_.plan->peer));
        }
        throw StallError(s_.plan->peer,
                         "waiting for " + rank_str(s_.plan->peer) + " to take this rank's data");
      }
      fds[0] = fds[1] = {-1, 0, 0};
    }
  }

  // One side waits alone, and join_ may offer the other.
  bool may_join() const { return join_ && !joined_ && (!s_.plan != !r_.plan); }
  // Takes on what join_ offers, if anything.
  bool take_join() {
    const JoinOffer offer = (*join_)(!s_.plan);
    if (s_.plan ? !offer.recv : !offer.send) return false;
    joined_ = true;
    joined_send_ = !s_.plan;
    if (joined_send_) {
      attach_send(offer.send, offer.id);
    } else {
      attach_recv(offer.recv, offer.id);
    }
    return true;
  }
  void attach_send(SendPlan* send, const OpId* id) {
    if (!send || send->count == 0) return;
    sid_ = id;
    s_.plan = send;
    s_.pair = &mesh_.pair(send->peer, deadline_);
    if (FrameSeal* seal = mesh_.seal(send->peer)) s_.mac = &seal->send();
    spin_ = std::max(spin_, spin_of(s_.pair));
  }
  void attach_recv(RecvPlan* recv, const OpId* id) {
    if (!recv || recv->count == 0) return;
    id_ = id;
    r_.plan = recv;
    r_.pair = &mesh_.pair(recv->peer, deadline_);
    if (FrameSeal* seal = mesh_.seal(recv->peer)) r_.mac = &seal->recv();
    spin_ = std::max(spin_, spin_of(r_.pair));
  }
  std::chrono::nanoseconds spin_of(const transport::Pair* p) const {
    return p->kind() == transport::Kind::Shm ? spin_in_.shm : spin_in_.tcp;
  }

 public:
  // Once the side it was started with is done: whether the joined side had not begun (no byte
  // of it sent or received; whole messages for other recvs may have been stashed), so that it
  // was left for later.
  bool left_joined() const { return left_joined_; }

 private:
  bool joined_begun() const {
    if (joined_send_) return s_.i > 0 || s_.active;
    return r_.i > 0 ||
           !(r_.phase == RecvState::Idle || (r_.phase == RecvState::Header && r_.hdr_got == 0));
  }
  bool left_joined_ = false;

  // The sides the wait found ready are unblocked; the wait took since t0.
  void ready(bool out, bool in, std::chrono::steady_clock::time_point t0) {
    if (OpTiming* timing = t_op_timing) {
      timing->wait_ns += (std::chrono::steady_clock::now() - t0).count();
    }
    if (out) s_.blocked = false;
    if (in) r_.blocked = false;
  }

  // How often a wait alone asks join_ for the other side.
  static constexpr int kJoinPollMs = 2;

  Mesh& mesh_;
  Counters& counters_;
  const OpId* sid_;
  const OpId* id_;
  size_t fold_bytes_;
  Spin spin_in_;
  Deadline deadline_;
  const Join* join_;
  bool joined_ = false;  // a side came from join_
  bool joined_send_ = false;
  std::chrono::nanoseconds spin_{0};
  bool yield_ = false;
  SendState s_;
  RecvState r_;
};

// The operation's timing (when one is kept on this thread) notes the peers it exchanged with.
void note_peers(const SendPlan* send, const RecvPlan* recv) {
  if (OpTiming* timing = t_op_timing) {
    for (int peer : {send ? send->peer : -1, recv ? recv->peer : -1}) {
      if (peer >= 0) timing->peers |= uint64_t{1} << std::min(peer, 63);
    }
  }
}

}  // namespace

void exchange(Mesh& mesh, Counters& counters, const OpId& id, SendPlan* send, RecvPlan* recv,
              Deadline deadline, Spin spin, size_t fold_bytes) {
  note_peers(send, recv);
  Engine(mesh, counters, id, id, send, recv, spin, fold_bytes, deadline).run(deadline);
}

bool exchange_messages(Mesh& mesh, Counters& counters, const OpId& send_id, SendPlan* send,
                       const OpId& recv_id, RecvPlan* recv, Deadline deadline, Spin spin,
                       const Join& join) {
  note_peers(send, recv);
  Engine engine(mesh, counters, send_id, recv_id, send, recv, spin, 0, deadline, &join);
  engine.run(deadline);
  return !engine.left_joined();
}

}  // namespace cohort::comm
