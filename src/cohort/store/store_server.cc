// StoreServer: one thread, one poll(2) loop, many clients.
//
// Each connection moves through  Hello -> Response -> Ready  (or -> Closing on a failed handshake,
// which flushes a Reject and then closes). The handshake is the net::ServerHandshake state machine
// fed with frames assembled by a non-blocking FrameReader, so a client that trickles bytes or sends
// nothing costs one pollfd and is closed at its handshake deadline; it never delays anyone else.
//
// Requests are answered at once, except get and wait on keys that do not exist yet: those park a
// Waiter (one per connection, the protocol allows one request in flight) indexed by the keys it
// needs. Every mutation re-checks the waiters of the key it touched; every loop iteration expires
// the waiters whose deadlines passed with a timeout response that lists the missing keys.
//
// poll's timeout is the earliest handshake or waiter deadline; stop() wakes the loop through an
// eventfd. A connection whose response is not yet flushed is not read from, so a client that does
// not read its responses holds at most one request and one response in memory.
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "cohort/base/error.h"
#include "cohort/base/log.h"
#include "cohort/net/descriptors.h"
#include "cohort/net/frame_stream.h"
#include "cohort/net/handshake.h"
#include "cohort/store/memory_store.h"
#include "cohort/store/store_protocol.h"
#include "cohort/store/tcp_store.h"

namespace cohort::store {
namespace {

constexpr const char* kServerInfo = "cohort store";
// How long a rejected client gets to read its Reject before we close.
constexpr Millis kCloseLinger{500};
// Server-side waits longer than this are clamped (keeps deadline arithmetic far from overflow).
constexpr uint64_t kMaxWaitMs = 7ull * 24 * 3600 * 1000;
constexpr int kMaxAcceptsPerWake = 64;

}  // namespace

class StoreServer::Impl {
 public:
  explicit Impl(const StoreServerOptions& o);
  ~Impl() { stop(); }

  uint16_t port() const { return listener_.port(); }
  net::Endpoint endpoint() const { return endpoint_; }
  void stop();

 private:
  enum class State { kHello, kResponse, kReady, kClosing };
  struct Conn {
    uint64_t id = 0;
    net::Socket sock;
    std::string peer;
    State state = State::kHello;
    Deadline deadline = Deadline::never();  // handshake or linger deadline
    std::unique_ptr<net::ServerHandshake> handshake;
    net::FrameReader reader;
    net::FrameWriter writer;
    bool parked = false;
  };
  struct Waiter {
    StoreOp op;
    std::vector<std::string> keys;
    Deadline deadline;
  };

  void run();
  void loop_once();
  Deadline next_deadline() const;
  void accept_clients();
  void serve(Conn& c, short revents);
  void handle_frame(Conn& c, net::Frame f);
  void handle_request(Conn& c, const StoreRequest& q);
  void respond(Conn& c, StoreOp op, const StoreResponse& r);
  void flush(Conn& c);
  void notify(const std::string& key);
  void finish_waiter(uint64_t id, bool timed_out);
  // Unparks a connection's waiter and returns it (nullopt if it had none).
  std::optional<Waiter> drop_waiter(uint64_t id);
  void expire();
  // Closes a client; a warning (the one log line a misbehaving client costs) when warn is set.
  void close(uint64_t id, const std::string& reason, bool warn);

  StoreServerOptions opts_;
  size_t max_request_bytes_;
  net::Listener listener_;
  net::Endpoint endpoint_;
  int wake_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::mutex stop_mu_;
  Deadline accept_paused_until_ = Deadline(Clock::time_point::min());

  MemoryStore data_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, std::unique_ptr<Conn>> conns_;
  std::map<uint64_t, Waiter> waiters_;  // by connection id
  std::unordered_multimap<std::string, uint64_t> waiting_on_;
  std::thread thread_;
};

// Many clients connect at once when a large job starts.
constexpr int kBacklog = 4096;

StoreServer::Impl::Impl(const StoreServerOptions& o)
    : opts_(o),
      // compare_set carries two values; 1 MiB leaves room for the keys.
      max_request_bytes_(2 * o.max_value_bytes + (1u << 20)),
      listener_(net::Listener::bind(o.bind_host, o.port, kBacklog)) {
  std::string host = o.bind_host;
  if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";
  if (host == "::") host = "::1";
  endpoint_ = net::Endpoint{host, listener_.port()};
  net::ensure_descriptors(o.max_connections + 64, "store server on " + endpoint_.str());
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) throw SystemError("eventfd", errno);
  thread_ = std::thread([this] { run(); });
}

void StoreServer::Impl::stop() {
  std::lock_guard lk(stop_mu_);
  if (!thread_.joinable()) return;
  stopping_ = true;
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof(one));
  thread_.join();
  conns_.clear();
  listener_.close();
  ::close(wake_fd_);
  wake_fd_ = -1;
}

void StoreServer::Impl::run() {
  spdlog::debug("store server listening on {}", endpoint_.str());
  while (!stopping_) {
    try {
      loop_once();
    } catch (const std::exception& e) {
      // Only poll/accept failures reach here; per-client errors are handled per client.
      spdlog::error("store server on {}: {}", endpoint_.str(), e.what());
      std::this_thread::sleep_for(Millis(10));
    }
  }
}

Deadline StoreServer::Impl::next_deadline() const {
  Deadline d = Deadline::never();
  for (const auto& [id, c] : conns_) d = d.earlier(c->deadline);
  for (const auto& [id, w] : waiters_) d = d.earlier(w.deadline);
  if (!accept_paused_until_.expired()) d = d.earlier(accept_paused_until_);
  return d;
}

void StoreServer::Impl::loop_once() {
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;
  fds.reserve(conns_.size() + 2);
  fds.push_back({wake_fd_, POLLIN, 0});
  bool listening = accept_paused_until_.expired();
  fds.push_back({listening ? listener_.fd() : -1, POLLIN, 0});
  for (const auto& [id, c] : conns_) {
    short ev = 0;
    if (!c->writer.empty()) {
      ev = POLLOUT;  // finish the response before reading anything else
    } else if (c->state != State::kClosing) {
      ev = POLLIN;
    }
    fds.push_back({c->sock.fd(), ev, 0});
    ids.push_back(id);
  }
  int rc = ::poll(fds.data(), fds.size(), next_deadline().poll_timeout_ms());
  if (rc < 0) {
    if (errno == EINTR) return;
    throw SystemError("poll", errno);
  }
  if (fds[0].revents) {
    uint64_t v;
    [[maybe_unused]] ssize_t n = ::read(wake_fd_, &v, sizeof(v));
    if (stopping_) return;
  }
  if (fds[1].revents) accept_clients();
  for (size_t i = 0; i < ids.size(); ++i) {
    short rev = fds[i + 2].revents;
    if (!rev) continue;
    auto it = conns_.find(ids[i]);
    if (it != conns_.end()) serve(*it->second, rev);
  }
  expire();
}

void StoreServer::Impl::accept_clients() {
  for (int i = 0; i < kMaxAcceptsPerWake; ++i) {
    int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: stop listening briefly instead of spinning on a readable listener.
        spdlog::warn("store server on {}: cannot accept: {}", endpoint_.str(), strerror(errno));
        accept_paused_until_ = Deadline::after(Millis(100));
        return;
      }
      throw SystemError("accept", errno);
    }
    auto c = std::make_unique<Conn>();
    c->sock = net::Socket(fd);
    c->sock.set_nodelay(true);
    c->peer = c->sock.peer_address();
    if (conns_.size() >= opts_.max_connections) {
      spdlog::warn(
          "store server on {}: refusing client {}: already serving {} connections "
          "(max_connections)",
          endpoint_.str(), c->peer, conns_.size());
      continue;  // ~Conn closes it
    }
    c->id = next_id_++;
    c->deadline = Deadline::after(opts_.handshake_timeout);
    c->handshake = std::make_unique<net::ServerHandshake>(opts_.token, kServerInfo);
    conns_.emplace(c->id, std::move(c));
  }
}

void StoreServer::Impl::serve(Conn& c, short revents) {
  const uint64_t id = c.id;
  try {
    if (!c.writer.empty() || c.state == State::kClosing) {
      if (revents & (POLLERR | POLLHUP | POLLNVAL)) {
        if (c.state == State::kClosing) return close(id, "", false);
        throw PeerLostError(-1, "connection lost");
      }
      flush(c);
      return;
    }
    size_t limit = c.state == State::kReady ? max_request_bytes_ : net::kMaxHandshakeFrame;
    if (!c.reader.read(c.sock, limit)) {
      if (revents & (POLLERR | POLLNVAL)) throw PeerLostError(-1, "socket error");
      return;
    }
    handle_frame(c, c.reader.take());
  } catch (const PeerLostError& e) {
    if (c.reader.mid_frame()) {
      close(id,
            "connection closed in the middle of a frame (" + std::to_string(c.reader.received()) +
                " bytes received)",
            true);
    } else if (c.state == State::kHello || c.state == State::kResponse) {
      close(id, "connection closed before the handshake completed", true);
    } else {
      close(id, "", false);  // a client that leaves between requests is not misbehaving
    }
  } catch (const std::exception& e) {
    // ProtocolError, AuthError, and anything a malformed request could provoke.
    close(id, e.what(), true);
  }
}

void StoreServer::Impl::handle_frame(Conn& c, net::Frame f) {
  switch (c.state) {
    case State::kHello:
      c.writer.push(net::MsgType::kChallenge, c.handshake->on_hello(f));
      c.state = State::kResponse;
      break;
    case State::kResponse:
      try {
        c.handshake->on_response(f);
      } catch (const AuthError& e) {
        spdlog::warn("store server on {}: closing client {}: {}", endpoint_.str(), c.peer,
                     e.what());
        c.writer.push(net::MsgType::kReject, {});
        c.state = State::kClosing;
        c.deadline = Deadline::after(kCloseLinger);
        break;
      }
      spdlog::debug("store server on {}: client {} ({}) authenticated", endpoint_.str(), c.peer,
                    c.handshake->client_info());
      c.handshake.reset();
      c.writer.push(net::MsgType::kAccept, {});
      c.state = State::kReady;
      c.deadline = Deadline::never();
      break;
    case State::kReady: {
      if (f.type != static_cast<uint16_t>(net::MsgType::kStoreRequest)) {
        throw ProtocolError("unexpected message type " + std::to_string(f.type) +
                            " (expected a store request)");
      }
      if (c.parked) throw ProtocolError("a second request while a get or wait is in flight");
      handle_request(c, decode_request(f.payload));
      break;
    }
    case State::kClosing:
      break;
  }
  flush(c);  // most responses fit the socket buffer: no extra poll round
}

void StoreServer::Impl::flush(Conn& c) {
  // After a Reject, half-close so the client reads the Reject and then end-of-stream, and we close
  // at the linger deadline or on hang-up, whichever is first (closing at once could reset the
  // connection before the client reads why).
  if (c.writer.flush(c.sock) && c.state == State::kClosing) ::shutdown(c.sock.fd(), SHUT_WR);
}

void StoreServer::Impl::handle_request(Conn& c, const StoreRequest& q) {
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
        notify(key);
        break;
      case StoreOp::kAdd:
        r.number = data_.add(key, q.delta);
        notify(key);
        break;
      case StoreOp::kCompareSet:
        check_value(q.desired);
        r.value = data_.compare_set(key, q.value, q.desired);
        notify(key);
        break;
      case StoreOp::kDelete:
        r.number = data_.delete_key(key) ? 1 : 0;
        break;
      case StoreOp::kCheck:
        r.number = data_.check(q.keys) ? 1 : 0;
        break;
      case StoreOp::kGet:
      case StoreOp::kWait:
        if (!data_.check(q.keys)) {
          auto ms = Millis(std::min(q.timeout_ms, kMaxWaitMs));
          waiters_.emplace(c.id, Waiter{q.op, q.keys, Deadline::after(ms)});
          for (const auto& k : q.keys) waiting_on_.emplace(k, c.id);
          c.parked = true;
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
  respond(c, q.op, r);
}

void StoreServer::Impl::respond(Conn& c, StoreOp op, const StoreResponse& r) {
  c.writer.push(net::MsgType::kStoreResponse, encode_response(op, r));
}

void StoreServer::Impl::notify(const std::string& key) {
  std::vector<uint64_t> ready;
  auto [b, e] = waiting_on_.equal_range(key);
  for (auto it = b; it != e; ++it) {
    if (data_.check(waiters_.at(it->second).keys)) ready.push_back(it->second);
  }
  for (uint64_t id : ready) finish_waiter(id, false);
}

void StoreServer::Impl::finish_waiter(uint64_t id, bool timed_out) {
  std::optional<Waiter> w = drop_waiter(id);
  if (!w) return;
  auto cit = conns_.find(id);
  if (cit == conns_.end()) return;
  Conn& c = *cit->second;
  c.parked = false;
  StoreResponse r;
  if (timed_out) {
    r.status = StoreStatus::kTimeout;
    for (const auto& k : w->keys) {
      if (!data_.check({k})) r.missing.push_back(k);
    }
  } else if (w->op == StoreOp::kGet) {
    r.value = *data_.try_get(w->keys.front());
  }
  respond(c, w->op, r);
  try {
    flush(c);
  } catch (const std::exception&) {
    close(id, "", false);  // the client left while it waited
  }
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
  std::vector<uint64_t> late_waiters, late_conns;
  for (const auto& [id, w] : waiters_) {
    if (w.deadline.expired()) late_waiters.push_back(id);
  }
  for (uint64_t id : late_waiters) finish_waiter(id, true);
  for (const auto& [id, c] : conns_) {
    if (c->deadline.expired()) late_conns.push_back(id);
  }
  for (uint64_t id : late_conns) {
    auto it = conns_.find(id);
    if (it == conns_.end()) continue;
    if (it->second->state == State::kClosing) {
      close(id, "", false);  // already logged when the handshake failed
    } else {
      close(id,
            "handshake not completed within " + std::to_string(opts_.handshake_timeout.count()) +
                " ms",
            true);
    }
  }
}

void StoreServer::Impl::close(uint64_t id, const std::string& reason, bool warn) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  if (warn) {
    spdlog::warn("store server on {}: closing client {}: {}", endpoint_.str(), it->second->peer,
                 reason);
  } else {
    spdlog::debug("store server on {}: client {} left", endpoint_.str(), it->second->peer);
  }
  drop_waiter(id);
  conns_.erase(it);
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
