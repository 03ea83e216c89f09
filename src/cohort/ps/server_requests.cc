// A parameter server's requests (server.h): the workers' on the primary, the primary's
// replication stream on the backup. Both go through apply() and resolve(), so that primary and
// backup change their shards the same way.
#include <algorithm>
#include <cstring>

#include "cohort/base/bytes.h"
#include "cohort/base/error.h"
#include "cohort/base/log.h"
#include "cohort/ps/server_impl.h"

namespace cohort::ps {
namespace {

// How long a pause request waits for another slot to be held before it is answered anyway.
constexpr Millis kPauseAsk{50};

}  // namespace

void Server::Impl::on_frame(ConnId conn, net::Frame f) {
  if (link_conns_.count(conn)) {  // a link to a backup: its acknowledgements
    if (f.type != static_cast<uint16_t>(net::MsgType::kPsResponse)) {
      throw ProtocolError("unexpected message type " + std::to_string(f.type) +
                          " on a replication link");
    }
    on_forward_ack(conn, decode_response(f.payload));
    return;
  }
  if (f.type != static_cast<uint16_t>(net::MsgType::kPsRequest)) {
    throw ProtocolError("unexpected message type " + std::to_string(f.type) +
                        " (expected a parameter-server request)");
  }
  if (busy_.count(conn)) throw ProtocolError("a second request while one is in flight");
  const Request q = decode_request(f.payload);
  if (q.shard >= static_cast<uint32_t>(settings_.servers)) {
    throw ProtocolError("request for shard " + std::to_string(q.shard) + " of " +
                        std::to_string(settings_.servers));
  }
  if (q.op == Op::kReplicate || q.op == Op::kSync) return handle_replica(conn, q);
  handle_request(conn, q, f.payload);
}

Response Server::Impl::base_response(const Request& q, const Held* h) const {
  Response r{.id = q.id, .view = view_.number};
  if (h && h->shard) {
    r.version = h->shard->version();
    r.min_clock = h->shard->min_clock();
    r.applied = h->shard->applied();
    r.stopped = h->shard->stopped();
  }
  return r;
}

void Server::Impl::answer(ConnId conn, const Response& r) {
  busy_.erase(conn);
  server_.send(conn, net::MsgType::kPsResponse, encode_response(r));
}

void Server::Impl::handle_request(ConnId conn, const Request& q,
                                  const std::vector<uint8_t>& payload) {
  Held& h = shards_[q.shard];
  Response r = base_response(q, &h);
  if (fenced_flag_ || !is_primary(q.shard)) {
    r.status = Status::kNotPrimary;
    r.message = fenced_flag_ ? name() + " is stopping"
                             : name() + " does not serve shard " + std::to_string(q.shard) +
                                   " in view " + std::to_string(view_.number);
    return answer(conn, r);
  }
  if (q.op == Op::kControl && (q.action == Control::kPause || q.action == Control::kResume)) {
    return handle_pause(conn, q);
  }
  std::optional<Waiting> w = apply(q.shard, h, q, r);
  if (!w) return answer(conn, r);
  w->conn = conn;
  w->fwd = forward(q.shard, h, payload);
  busy_.insert(conn);
  h.waiting.push_back(std::move(*w));
  resolve(h);
  // A retired slot's worker is gone for good (the job declared it lost): its pause ends with it.
  if (q.op == Op::kControl && q.action == Control::kRetire && pause_ && pause_->slot == q.slot) {
    spdlog::warn("{}: slot {} was retired while it held a pause: the pause ends", name(), q.slot);
    end_pause();
  }
}

std::optional<Server::Impl::Waiting> Server::Impl::apply(uint32_t shard, Held& h, const Request& q,
                                                         Response& r) {
  try {
    switch (q.op) {
      case Op::kInit: {
        if (!h.shard) {
          if (q.saved_state) {
            try {
              h.shard.emplace(Shard::restore(settings_.shard, q.blob));
            } catch (const ProtocolError& e) {
              // A well-formed request whose saved shard this server cannot take (another job's
              // number of slots): refused by name, not a connection dropped and sent again.
              throw Error(std::string("a saved shard that cannot be restored: ") + e.what());
            }
            if (h.shard->range() != q.range) {
              h.shard.reset();
              throw Error("an init whose saved shard is not of its range");
            }
          } else {
            if (q.blob.size() != q.range.count * sizeof(float)) {
              throw Error("an init of " + std::to_string(q.range.count) + " values carrying " +
                          std::to_string(q.blob.size()) + " bytes");
            }
            std::vector<float> params(q.range.count);
            copy_bytes(params.data(), q.blob.data(), q.blob.size());
            h.shard.emplace(settings_.shard, q.range, std::move(params));
          }
          spdlog::info("{}: shard {} holds [{}, {})", name(), shard, q.range.offset, q.range.end());
        } else if (h.shard->range() != q.range) {
          throw Error("shard " + std::to_string(shard) + " holds [" +
                      std::to_string(h.shard->range().offset) + ", " +
                      std::to_string(h.shard->range().end()) + "), not the range of this init");
        } else {
          r.duplicate = true;  // a worker that started later, or a resend
        }
        return Waiting{.response = r};
      }
      case Op::kPushPull: {
        if (!h.shard) {
          r.status = Status::kNotReady;
          r.message = "shard " + std::to_string(shard) + " has no parameters yet";
          return std::nullopt;
        }
        // Checked before anything waits on them: a request the shard could not answer later
        // would stay at the front of its queue.
        h.shard->check_slot(q.slot);
        h.shard->check_ranges(q.ranges);
        if (q.push) {
          r.duplicate = !h.shard->push(q.slot, q.clock, q.lr, q.ranges, q.values, q.counts);
        }
        return Waiting{
            .response = r,
            .pull = q.pull,
            .holdable = true,
            .slot = q.slot,
            .min_version = q.min_version,
            .min_clock = q.min_clock,
            .answer_by = q.wait_ms > 0 ? Deadline::after(Millis(q.wait_ms)) : Deadline::never(),
            .ranges = q.ranges,
            .fresh_version = q.push && q.fresh_ms > 0 ? q.clock + 1 : 0,
            .fresh_by = q.push && q.fresh_ms > 0 ? Deadline::after(Millis(q.fresh_ms))
                                                 : Deadline(Clock::time_point::min())};
      }
      case Op::kControl:
        if (!h.shard) {
          // A retirement as the job starts again before any worker set the parameters.
          r.status = Status::kNotReady;
          r.message = "shard " + std::to_string(shard) + " has no parameters yet";
          return std::nullopt;
        }
        if (q.action == Control::kStop) {
          h.shard->stop();
        } else if (q.action == Control::kRetire) {
          h.shard->retire(q.slot);
        } else {
          throw ProtocolError("a pause is not a change of a shard");
        }
        return Waiting{.response = base_response(q, &h)};
      case Op::kStatus:
      case Op::kSnapshot:
        if (!h.shard) {
          r.status = Status::kNotReady;
          r.message = "shard " + std::to_string(shard) + " has no parameters yet";
        } else {
          r.body = q.op == Op::kStatus ? encode_status(h.shard->status()) : h.shard->save();
        }
        return std::nullopt;
      case Op::kReplicate:
      case Op::kSync:
        break;
    }
    throw ProtocolError(std::string("a ") + op_name(q.op) + " request cannot be applied");
  } catch (const ProtocolError&) {
    throw;
  } catch (const Error& e) {
    // Well-formed but impossible (a clock out of order, a range outside the shard): say so.
    r.status = Status::kError;
    r.message = name() + ", shard " + std::to_string(shard) + ": " + e.what();
    return std::nullopt;
  }
}

// Answers, in order, what can be answered now: pulls whose version the shard has reached (or
// that will never come: the job stopped), once the backup has the changes they wait for.
void Server::Impl::resolve(Held& h) {
  for (auto it = h.waiting.begin(); it != h.waiting.end();) {
    Waiting& w = *it;
    const bool reached =
        h.shard && ((h.shard->version() >= w.min_version && h.shard->min_clock() >= w.min_clock) ||
                    h.shard->stopped());
    if (w.fresh_version > 0 && w.fresh_by.expired()) w.fresh_version = 0;  // waited enough
    const bool fresh = h.shard && (h.shard->version() >= w.fresh_version || h.shard->stopped());
    if (w.pull && !w.pulled && h.shard && ((reached && fresh) || w.answer_by.expired())) {
      // A read that did not wait for what it asked is an answer, not a read the slot computes on.
      if (reached) h.shard->note_read(w.slot);
      w.response.reached = reached;
      w.pulled = true;
      if (w.conn != 0) {
        Response& r = w.response;
        r.version = h.shard->version();
        r.min_clock = h.shard->min_clock();
        r.applied = h.shard->applied();
        r.stopped = h.shard->stopped();
        uint64_t n = 0;
        for (const Range& g : w.ranges) n += g.count;
        r.body.resize(n * sizeof(float));
        h.shard->read(w.ranges, r.body.data());
      }
    }
    const bool replicated = w.fwd == 0 || w.fwd <= h.acked_upto;
    if (!replicated || (w.pull && !w.pulled)) {
      ++it;
      continue;
    }
    if (w.conn != 0 && w.holdable && pause_ && w.slot != pause_->slot) {
      if (!w.held_since) {  // another slot evaluates: wait, and say so
        w.held_since = Clock::now();
        notice_held(w);
      }
      ++it;
      continue;
    }
    if (w.conn != 0) {
      if (w.held_since) {
        w.response.held_us = static_cast<uint64_t>(
            std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - *w.held_since)
                .count());
      }
      answer(w.conn, w.response);
    }
    it = h.waiting.erase(it);
  }
  if (pause_) check_pause();
}

void Server::Impl::notice_held(Waiting& w) {
  Response r{.id = w.response.id, .status = Status::kHeld, .view = view_.number};
  r.message = "held while slot " + std::to_string(pause_->slot) + " evaluates";
  // Not answer(): the request is still in flight on this connection.
  server_.send(w.conn, net::MsgType::kPsResponse, encode_response(r));
  w.notice_by = Deadline::after(kHeldNotice);
}

void Server::Impl::handle_pause(ConnId conn, const Request& q) {
  Response r{.id = q.id, .view = view_.number};
  if (q.action == Control::kResume) {
    if (pause_ && pause_->slot == q.slot) end_pause();
    return answer(conn, r);
  }
  if (pause_ && pause_->slot != q.slot) {
    r.status = Status::kError;
    r.message = "slot " + std::to_string(pause_->slot) + " holds a pause already";
    return answer(conn, r);
  }
  if (!pause_) pause_ = Pause{.slot = q.slot};
  pause_->asks.push_back({conn, r, q.known, Deadline::after(kPauseAsk)});
  pause_->conns.insert(conn);
  busy_.insert(conn);
  check_pause();
}

// A slot is held when a request of it waits here; the pausing worker gathers the held slots of
// every server (a worker whose answer is held by any one server is waiting).
void Server::Impl::check_pause() {
  if (!pause_ || pause_->asks.empty()) return;
  std::set<uint32_t> active, held;
  for (const auto& [s, h] : shards_) {
    if (!h.shard) continue;
    const auto clocks = h.shard->slot_clocks();
    for (size_t slot = 0; slot < clocks.size(); ++slot) {
      if (clocks[slot] >= 0 && slot != pause_->slot) active.insert(static_cast<uint32_t>(slot));
    }
    for (const Waiting& w : h.waiting) {
      if (w.conn != 0 && w.holdable) held.insert(w.slot);
    }
  }
  const bool all = std::includes(held.begin(), held.end(), active.begin(), active.end());
  const std::vector<uint8_t> body =
      encode_pause({.held = {held.begin(), held.end()}, .active = {active.begin(), active.end()}});
  std::vector<Pause::Ask> still;
  for (Pause::Ask& a : pause_->asks) {
    if (!all && held.size() <= a.known && !a.answer_by.expired()) {
      still.push_back(std::move(a));
      continue;
    }
    a.response.body = body;
    answer(a.conn, a.response);
  }
  pause_->asks = std::move(still);
}

void Server::Impl::end_pause() {
  for (auto& a : pause_->asks) answer(a.conn, a.response);
  pause_.reset();
  for (auto& [s, h] : shards_) resolve(h);
}

// The backup's side of a link: the primary's changes, in its order, or the whole shard.
void Server::Impl::handle_replica(ConnId conn, const Request& q) {
  auto peer = peers_.find(conn);
  auto from = peer == peers_.end() ? std::nullopt : parse_server_info(peer->second);
  if (!from || (q.op == Op::kReplicate && static_cast<uint32_t>(from->first) != q.from_server)) {
    throw ProtocolError("replication from a peer that is not that parameter server");
  }
  const bool later = std::any_of(deferred_.begin(), deferred_.end(),
                                 [conn](const auto& d) { return d.first == conn; });
  if (later || (q.view > view_.number && is_primary(q.shard))) {
    // This server still serves the shard: the view that hands it over is on its way.
    if (!later) {
      spdlog::info("{}: replication of shard {} from view {} waits for that view", name(),
                   q.shard, q.view);
    }
    deferred_.emplace_back(conn, q);
    return;
  }
  Response ack{.id = q.id, .view = view_.number};
  const bool current = in_view_ && q.shard < view_.shards.size() &&
                       view_.shards[q.shard].primary == from->first &&
                       view_.shards[q.shard].backup == options_.index &&
                       view_.servers[from->first].incarnation == from->second;
  // A newer view than ours will say the same soon; an older one is a primary that lost its role.
  if (fenced_flag_ || !(current || q.view > view_.number)) {
    ack.status = Status::kNotPrimary;
    ack.message = "server " + std::to_string(from->first) + " is not the primary of shard " +
                  std::to_string(q.shard) + " in view " + std::to_string(view_.number);
    return answer(conn, ack);
  }
  Held& h = shards_[q.shard];
  if (q.op == Op::kSync) {
    if (q.blob.empty()) {
      h.shard.reset();
    } else {
      h.shard.emplace(Shard::restore(settings_.shard, q.blob));
    }
    h.waiting.clear();
    spdlog::info("{}: holds shard {} as its backup (version {})", name(), q.shard,
                 h.shard ? h.shard->version() : -1);
    {
      std::lock_guard lk(mu_);
      synced_notes_.push_back(keys::synced(q.shard, incarnation_));
    }
    return answer(conn, ack);
  }
  const Request inner = decode_request(q.blob);
  if (inner.op == Op::kReplicate || inner.op == Op::kSync || inner.shard != q.shard) {
    throw ProtocolError("a replicated request must be a change of the same shard");
  }
  Response r = base_response(inner, &h);
  if (std::optional<Waiting> w = apply(q.shard, h, inner, r)) {
    w->conn = 0;
    w->fwd = 0;
    w->fresh_version = 0;  // nobody waits for a backup's answer
    h.waiting.push_back(std::move(*w));
    resolve(h);
  } else if (r.status != Status::kOk) {
    // The primary applied it: a backup that cannot has a different shard.
    spdlog::error("{}: replicated {} of shard {} failed here: {}", name(), op_name(inner.op),
                  q.shard, r.message);
  }
  answer(conn, ack);
}

}  // namespace cohort::ps
