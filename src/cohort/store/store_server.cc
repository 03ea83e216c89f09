// StoreServer: the rendezvous store served by a net::FrameServer (one thread, one poll loop, many
// authenticated clients; frame_server.h says how misbehaving connections are handled).
//
// Requests are answered at once, except get and wait on keys that do not exist yet: those park a
// Waiter (one per connection, the protocol allows one request in flight) indexed by the keys it
// needs. Every mutation re-checks the waiters of the key it touched; every loop iteration expires
// the waiters whose deadlines passed with a timeout response that lists the missing keys.
//
// With a journal, every change is appended to it before its request is answered. A journal that
// cannot be written (a full disk) is given up with an error in the log and renamed *.abandoned:
// the job goes on, and a coordinator started again over its run directory restarts from the
// checkpoints instead of replaying a journal that lacks what was acknowledged since.
#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <unordered_map>

#include "cohort/base/error.h"
#include "cohort/base/log.h"
#include "cohort/net/frame_server.h"
#include "cohort/store/journal.h"
#include "cohort/store/memory_store.h"
#include "cohort/store/store_protocol.h"
#include "cohort/store/tcp_store.h"

namespace cohort::store {
namespace {

// Server-side waits longer than this are clamped (keeps deadline arithmetic far from overflow).
constexpr uint64_t kMaxWaitMs = 7ull * 24 * 3600 * 1000;

}  // namespace

class StoreServer::Impl : public net::FrameServer::Handler {
 public:
  explicit Impl(const StoreServerOptions& o);
  ~Impl() override { stop(); }

  uint16_t port() const { return server_.port(); }
  net::Endpoint endpoint() const { return server_.endpoint(); }
  void stop() { server_.stop(); }

  void on_frame(uint64_t conn, net::Frame f) override;
  void on_closed(uint64_t conn) override { drop_waiter(conn); }
  Deadline next_deadline() override;
  void on_tick() override { expire(); }

 private:
  struct Waiter {
    StoreOp op;
    std::vector<std::string> keys;  // distinct
    Deadline deadline;
    // keys[0, present) were there when last looked at: a new key is looked for from here, so a
    // waiter on many keys costs each set that concerns it little, not a look at every key.
    size_t present = 0;
  };

  void handle_request(uint64_t conn, const StoreRequest& q);
  void respond(uint64_t conn, StoreOp op, const StoreResponse& r);
  void notify(const std::string& key);
  void finish_waiter(uint64_t id, bool timed_out);
  // Unparks a connection's waiter and returns it (nullopt if it had none).
  std::optional<Waiter> drop_waiter(uint64_t id);
  void expire();
  // The journal's record of a change to `key` (its value now, or its removal).
  void journal(const std::string& key);

  StoreServerOptions opts_;
  MemoryStore data_;
  std::unique_ptr<StoreJournal> journal_;
  std::map<uint64_t, Waiter> waiters_;  // by connection id
  std::unordered_multimap<std::string, uint64_t> waiting_on_;
  net::FrameServer server_;
};

StoreServer::Impl::Impl(const StoreServerOptions& o)
    : opts_(o),
      server_({.name = "store server",
               .bind_host = o.bind_host,
               .port = o.port,
               .token = o.token,
               .info = "cohort store",
               .handshake_timeout = o.handshake_timeout,
               .max_connections = o.max_connections,
               .max_handshakes = o.max_handshakes,
               // compare_set carries two values; 1 MiB leaves room for the keys.
               .max_frame_bytes = 2 * o.max_value_bytes + (1u << 20)},
              *this) {
  if (!o.journal.empty()) {
    std::map<std::string, Bytes> kept = StoreJournal::replay(o.journal);
    for (const auto& [k, v] : kept) data_.set(k, v);
    journal_ = std::make_unique<StoreJournal>(o.journal, kept);
    if (!kept.empty()) spdlog::info("store: {} keys from {}", kept.size(), o.journal);
  }
  server_.start();
}

void StoreServer::Impl::journal(const std::string& key) {
  if (!journal_) return;
  try {
    if (auto v = data_.try_get(key)) {
      journal_->put(key, *v);
    } else {
      journal_->erase(key);
    }
    if (journal_->wants_compaction()) journal_->compact(data_.contents());
  } catch (const Error& e) {
    // Out of the way: a coordinator started again over this run directory must not replay a
    // journal that lacks what was acknowledged from here on.
    const std::string path = journal_->path();
    std::error_code ec;
    std::string moved = "renamed *.abandoned";
    std::filesystem::rename(path, path + ".abandoned", ec);
    if (ec) {
      std::filesystem::remove(path, ec);
      moved = ec ? "could not remove it: " + ec.message() : "removed";
    }
    spdlog::error(
        "store: gave up the journal {} ({}): {}; a coordinator started again over this "
        "run directory restarts from its checkpoints",
        path, moved, e.what());
    journal_.reset();
  }
}

Deadline StoreServer::Impl::next_deadline() {
  Deadline d = Deadline::never();
  for (const auto& [id, w] : waiters_) d = d.earlier(w.deadline);
  return d;
}

void StoreServer::Impl::on_frame(uint64_t conn, net::Frame f) {
  if (f.type != static_cast<uint16_t>(net::MsgType::kStoreRequest)) {
    throw ProtocolError("unexpected message type " + std::to_string(f.type) +
                        " (expected a store request)");
  }
  if (waiters_.count(conn))
    throw ProtocolError("a second request while a get or wait is in flight");
  handle_request(conn, decode_request(f.payload));
}

void StoreServer::Impl::handle_request(uint64_t conn, const StoreRequest& q) {
  StoreResponse r;
  const std::string& key = q.keys.empty() ? std::string() : q.keys.front();
  auto check_value = [&](const Bytes& v) {
    if (v.size() > opts_.max_value_bytes) {
      throw Error("value of " + std::to_string(v.size()) + " bytes for key '" + key +
                  "' exceeds the store's limit of " + std::to_string(opts_.max_value_bytes));
    }
  };
  try {
    switch (q.op) {
      case StoreOp::kSet:
        check_value(q.value);
        data_.set(key, q.value);
        journal(key);
        notify(key);
        break;
      case StoreOp::kAdd:
        r.number = data_.add(key, q.delta);
        journal(key);
        notify(key);
        break;
      case StoreOp::kCompareSet:
        check_value(q.desired);
        r.value = data_.compare_set(key, q.value, q.desired);
        if (r.value == q.desired) journal(key);
        notify(key);
        break;
      case StoreOp::kDelete:
        r.number = data_.delete_key(key) ? 1 : 0;
        if (r.number) journal(key);
        break;
      case StoreOp::kCheck:
        r.number = data_.check(q.keys) ? 1 : 0;
        break;
      case StoreOp::kGet:
      case StoreOp::kWait:
        if (!data_.check(q.keys)) {
          auto ms = Millis(std::min(q.timeout_ms, kMaxWaitMs));
          std::vector<std::string> keys = q.keys;
          std::sort(keys.begin(), keys.end());
          keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
          for (const auto& k : keys) waiting_on_.emplace(k, conn);
          waiters_.emplace(conn, Waiter{q.op, std::move(keys), Deadline::after(ms)});
          spdlog::debug("store: connection {} waits for '{}'{}", conn, key,
                        q.keys.size() > 1 ? " and more" : "");
          return;
        }
        if (q.op == StoreOp::kGet) r.value = *data_.try_get(key);
        break;
    }
  } catch (const ProtocolError&) {
    throw;
  } catch (const Error& e) {
    // The request was well-formed but cannot be done (e.g. add on a non-integer): tell the client.
    r.status = StoreStatus::kError;
    r.error = e.what();
  }
  respond(conn, q.op, r);
}

void StoreServer::Impl::respond(uint64_t conn, StoreOp op, const StoreResponse& r) {
  server_.send(conn, net::MsgType::kStoreResponse, encode_response(op, r));
}

void StoreServer::Impl::notify(const std::string& key) {
  std::vector<uint64_t> ready;
  auto [b, e] = waiting_on_.equal_range(key);
  for (auto it = b; it != e; ++it) {
    Waiter& w = waiters_.at(it->second);
    w.present = data_.first_absent(w.keys, w.present);
    if (w.present < w.keys.size()) continue;
    // Every key was there when looked at; one may have been deleted since: look at all again.
    if (data_.check(w.keys)) {
      ready.push_back(it->second);
    } else {
      w.present = 0;
    }
  }
  for (uint64_t id : ready) finish_waiter(id, false);
}

void StoreServer::Impl::finish_waiter(uint64_t id, bool timed_out) {
  std::optional<Waiter> w = drop_waiter(id);
  if (!w || !server_.is_open(id)) return;
  StoreResponse r;
  if (timed_out) {
    r.status = StoreStatus::kTimeout;
    for (const auto& k : w->keys) {
      if (!data_.check({k})) r.missing.push_back(k);
    }
  } else if (w->op == StoreOp::kGet) {
    r.value = *data_.try_get(w->keys.front());
  }
  respond(id, w->op, r);  // a client that left while it waited is closed by send()
}

std::optional<StoreServer::Impl::Waiter> StoreServer::Impl::drop_waiter(uint64_t id) {
  auto wit = waiters_.find(id);
  if (wit == waiters_.end()) return std::nullopt;
  for (const auto& k : wit->second.keys) {
    auto [b, e] = waiting_on_.equal_range(k);
    for (auto it = b; it != e; ++it) {
      if (it->second == id) {
        waiting_on_.erase(it);
        break;
      }
    }
  }
  Waiter w = std::move(wit->second);
  waiters_.erase(wit);
  return w;
}

void StoreServer::Impl::expire() {
  std::vector<uint64_t> late;
  const Clock::time_point now = Clock::now();  // one clock read per round, not one per waiter
  for (const auto& [id, w] : waiters_) {
    if (w.deadline.at() <= now) late.push_back(id);
  }
  for (uint64_t id : late) finish_waiter(id, true);
}

StoreServer::StoreServer(const StoreServerOptions& options)
    : impl_(std::make_unique<Impl>(options)) {}
StoreServer::~StoreServer() = default;
uint16_t StoreServer::port() const {
  return impl_->port();
}
net::Endpoint StoreServer::endpoint() const {
  return impl_->endpoint();
}
void StoreServer::stop() {
  impl_->stop();
}

}  // namespace cohort::store
