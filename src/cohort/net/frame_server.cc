#include "cohort/net/frame_server.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "cohort/base/error.h"
#include "cohort/base/log.h"
#include "cohort/net/descriptors.h"
#include "cohort/net/frame_stream.h"
#include "cohort/net/handshake.h"

namespace cohort::net {
namespace {

// How long a rejected client gets to read its Reject before we close.
constexpr Millis kCloseLinger{500};
constexpr int kMaxAcceptsPerWake = 64;
// Many clients connect at once when a large job starts.
constexpr int kBacklog = 4096;
// epoll's data of the two descriptors that are not connections (connection ids start at 1).
constexpr uint64_t kWakeKey = 0;
constexpr uint64_t kListenerKey = ~uint64_t{0};
constexpr int kEventsPerWait = 256;

// poll(2)'s event bits as epoll(7)'s, for the code that reads them.
short poll_bits(uint32_t e) {
  short r = 0;
  if (e & EPOLLIN) r |= POLLIN;
  if (e & EPOLLOUT) r |= POLLOUT;
  if (e & EPOLLERR) r |= POLLERR;
  if (e & EPOLLHUP) r |= POLLHUP;
  return r;
}

}  // namespace

struct FrameServer::Conn {
  ConnId id = 0;
  Socket sock;
  std::string peer;
  State state = State::kHello;
  Deadline deadline = Deadline::never();  // handshake or linger deadline
  std::unique_ptr<ServerHandshake> handshake;
  FrameReader reader;
  FrameWriter writer;
  bool duplex = false;   // adopted: read while output is pending
  bool watched = false;  // registered with the epoll set
  uint32_t events = 0;   // what it is registered for
};

FrameServer::FrameServer(FrameServerOptions options, Handler& handler)
    : opts_(std::move(options)),
      handler_(handler),
      listener_(Listener::bind(opts_.bind_host, opts_.port, kBacklog)) {
  std::string host = opts_.bind_host;
  if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";
  if (host == "::") host = "::1";
  endpoint_ = Endpoint{host, listener_.port()};
  who_ = opts_.name + " on " + endpoint_.str();
  ensure_descriptors(opts_.max_connections + opts_.max_handshakes + 64, who_);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) throw SystemError("eventfd", errno);
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) {
    const int e = errno;
    ::close(wake_fd_);
    throw SystemError("epoll_create1", e);
  }
  epoll_event wake{.events = EPOLLIN, .data = {.u64 = kWakeKey}};
  epoll_event listen{.events = EPOLLIN, .data = {.u64 = kListenerKey}};
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &wake) != 0 ||
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listener_.fd(), &listen) != 0) {
    const int e = errno;
    ::close(epoll_fd_);
    ::close(wake_fd_);
    throw SystemError("epoll_ctl", e);
  }
}

FrameServer::~FrameServer() {
  stop();
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void FrameServer::start() {
  thread_ = std::thread([this] { run(); });
}

void FrameServer::stop() {
  std::lock_guard lk(stop_mu_);
  if (!thread_.joinable()) return;
  stopping_ = true;
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof(one));
  thread_.join();
  conns_.clear();
  listener_.close();
}

void FrameServer::post(std::function<void()> fn) {
  {
    std::lock_guard lk(post_mu_);
    posted_.push_back(std::move(fn));
  }
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof(one));
}

void FrameServer::adopt(Socket sock, std::string peer_info) {
  auto shared = std::make_shared<Socket>(std::move(sock));
  post([this, shared, info = std::move(peer_info)] {
    std::string peer = shared->peer_address();
    add_ready(std::move(*shared), std::move(peer), info);
  });
}

void FrameServer::run_posted() {
  std::vector<std::function<void()>> work;
  {
    std::lock_guard lk(post_mu_);
    work.swap(posted_);
  }
  for (auto& fn : work) fn();
}

void FrameServer::run() {
  spdlog::debug("{} listening", who_);
  while (!stopping_) {
    try {
      loop_once();
    } catch (const std::exception& e) {
      // Only poll/accept failures and the handler's timers reach here; per-connection errors
      // are handled per connection.
      spdlog::error("{}: {}", who_, e.what());
      std::this_thread::sleep_for(Millis(10));
    }
  }
}

Deadline FrameServer::next_deadline() const {
  Deadline d = handler_.next_deadline();
  for (ConnId id : timed_) d = d.earlier(conns_.at(id)->deadline);
  if (!listening_) d = d.earlier(accept_paused_until_);
  return d;
}

void FrameServer::loop_once() {
  if (!listening_ && accept_paused_until_.expired()) set_listening(true);
  epoll_event events[kEventsPerWait];
  const int n = ::epoll_wait(epoll_fd_, events, kEventsPerWait, next_deadline().poll_timeout_ms());
  if (n < 0) {
    if (errno == EINTR) return;
    throw SystemError("epoll_wait", errno);
  }
  for (int i = 0; i < n; ++i) {
    const uint64_t key = events[i].data.u64;
    if (key == kWakeKey) {
      uint64_t v;
      [[maybe_unused]] ssize_t r = ::read(wake_fd_, &v, sizeof(v));
      if (stopping_) return;
      run_posted();
    } else if (key == kListenerKey) {
      if (listening_) accept_clients();
    } else {
      serve(key, poll_bits(events[i].events));  // a connection closed meanwhile is skipped
    }
  }
  expire();
  handler_.on_tick();
}

void FrameServer::set_listening(bool on) {
  epoll_event e{.events = on ? uint32_t{EPOLLIN} : 0u, .data = {.u64 = kListenerKey}};
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listener_.fd(), &e) != 0) {
    throw SystemError("epoll_ctl (listener)", errno);
  }
  listening_ = on;
}

void FrameServer::watch(Conn& c) {
  uint32_t ev = 0;
  if (!c.writer.empty()) ev = EPOLLOUT;
  // An accepted connection finishes its response before anything else is read.
  if (c.state != State::kClosing && (c.writer.empty() || c.duplex)) ev |= EPOLLIN;
  if (c.watched && ev == c.events) return;
  epoll_event e{.events = ev, .data = {.u64 = c.id}};
  if (::epoll_ctl(epoll_fd_, c.watched ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c.sock.fd(), &e) != 0) {
    throw SystemError("epoll_ctl", errno);
  }
  c.watched = true;
  c.events = ev;
}

void FrameServer::set_deadline(Conn& c, Deadline d) {
  c.deadline = d;
  if (d.is_never()) {
    timed_.erase(c.id);
  } else {
    timed_.insert(c.id);
  }
}

void FrameServer::accept_clients() {
  for (int i = 0; i < kMaxAcceptsPerWake; ++i) {
    int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: stop listening briefly instead of spinning on a readable listener.
        spdlog::warn("{}: cannot accept: {}", who_, strerror(errno));
        accept_paused_until_ = Deadline::after(Millis(100));
        set_listening(false);
        return;
      }
      throw SystemError("accept", errno);
    }
    auto c = std::make_unique<Conn>();
    c->sock = Socket(fd);
    c->sock.set_nodelay(true);
    c->peer = c->sock.peer_address();
    const size_t authenticated = conns_.size() - handshaking_.size();
    if (authenticated >= opts_.max_connections) {
      spdlog::warn("{}: refusing client {}: already serving {} connections (max_connections)", who_,
                   c->peer, authenticated);
      continue;  // ~Conn closes it
    }
    if (handshaking_.size() >= std::max<size_t>(1, opts_.max_handshakes)) {
      close(*handshaking_.begin(),
            "making room: " + std::to_string(handshaking_.size()) +
                " connections are in their handshake (max_handshakes)",
            true);
    }
    c->id = next_id_++;
    c->handshake = std::make_unique<ServerHandshake>(opts_.token, opts_.info);
    handshaking_.insert(c->id);
    Conn& added = *conns_.emplace(c->id, std::move(c)).first->second;
    set_deadline(added, Deadline::after(opts_.handshake_timeout));
    try {
      watch(added);
    } catch (const std::exception& e) {
      close(added.id, e.what(), true);
    }
  }
}

void FrameServer::add_ready(Socket sock, std::string peer, const std::string& info) {
  auto c = std::make_unique<Conn>();
  c->sock = std::move(sock);
  c->sock.set_nonblocking(true);
  c->sock.set_nodelay(true);
  c->peer = std::move(peer);
  c->id = next_id_++;
  c->state = State::kReady;
  c->duplex = true;
  const ConnId id = c->id;
  Conn& added = *conns_.emplace(id, std::move(c)).first->second;
  try {
    watch(added);
  } catch (const std::exception& e) {
    close(id, e.what(), true);
    return;
  }
  handler_.on_ready(id, info, /*adopted=*/true);
}

std::string FrameServer::peer(ConnId conn) const {
  auto it = conns_.find(conn);
  return it == conns_.end() ? std::string("?") : it->second->peer;
}

void FrameServer::serve(ConnId id, short revents) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  Conn& c = *it->second;
  try {
    if (!c.writer.empty() || c.state == State::kClosing) {
      if ((revents & (POLLERR | POLLHUP | POLLNVAL)) && !(c.duplex && (revents & POLLIN))) {
        if (c.state == State::kClosing) return close(id, "", false);
        throw PeerLostError(-1, "connection lost");
      }
      flush(c);
      if (!c.duplex) return watch(c);
    }
    read_from(c, revents);
    if (auto still = conns_.find(id); still != conns_.end()) watch(*still->second);
  } catch (const PeerLostError& e) {
    auto still = conns_.find(id);
    if (still == conns_.end()) return;
    Conn& cc = *still->second;
    if (cc.reader.mid_frame()) {
      close(id,
            "connection closed in the middle of a frame (" + std::to_string(cc.reader.received()) +
                " bytes received)",
            true);
    } else if (cc.state == State::kHello || cc.state == State::kResponse) {
      close(id, "connection closed before the handshake completed", true);
    } else {
      close(id, "", false);  // a peer that leaves between requests is not misbehaving
    }
  } catch (const std::exception& e) {
    // ProtocolError, AuthError, and anything a malformed request could provoke.
    close(id, e.what(), true);
  }
}

void FrameServer::read_from(Conn& c, short revents) {
  const size_t limit = c.state == State::kReady ? opts_.max_frame_bytes : kMaxHandshakeFrame;
  // A duplex link drains every frame that has arrived; an accepted connection reads one request.
  for (;;) {
    if (!c.reader.read(c.sock, limit)) {
      if (revents & (POLLERR | POLLNVAL)) throw PeerLostError(-1, "socket error");
      return;
    }
    const ConnId id = c.id;
    const bool more = c.duplex;
    handle_frame(c, c.reader.take());
    if (!more || !is_open(id)) return;
  }
}

void FrameServer::handle_frame(Conn& c, Frame f) {
  const ConnId id = c.id;
  switch (c.state) {
    case State::kHello:
      c.writer.push(MsgType::kChallenge, c.handshake->on_hello(f));
      c.state = State::kResponse;
      break;
    case State::kResponse: {
      try {
        c.handshake->on_response(f);
      } catch (const AuthError& e) {
        spdlog::warn("{}: closing client {}: {}", who_, c.peer, e.what());
        c.writer.push(MsgType::kReject, {});
        c.state = State::kClosing;
        set_deadline(c, Deadline::after(kCloseLinger));
        break;
      }
      const std::string info = c.handshake->client_info();
      spdlog::debug("{}: client {} ({}) authenticated", who_, c.peer, info);
      c.handshake.reset();
      c.writer.push(MsgType::kAccept, {});
      c.state = State::kReady;
      handshaking_.erase(id);
      set_deadline(c, Deadline::never());
      flush(c);
      handler_.on_ready(id, info, /*adopted=*/false);
      return;
    }
    case State::kReady:
      handler_.on_frame(id, std::move(f));
      return;  // the handler may have closed it; send() flushes what it queued
    case State::kClosing:
      break;
  }
  flush(c);  // most responses fit the socket buffer: no extra poll round
}

void FrameServer::send(ConnId conn, MsgType type, const std::vector<uint8_t>& payload) {
  auto it = conns_.find(conn);
  if (it == conns_.end()) return;
  it->second->writer.push(type, payload);
  try {
    flush(*it->second);
    watch(*it->second);
  } catch (const std::exception&) {
    close(conn, "", false);  // the peer left; its requests die with it
  }
}

void FrameServer::flush(Conn& c) {
  // After a Reject, half-close so the client reads the Reject and then end-of-stream, and we close
  // at the linger deadline or on hang-up, whichever is first (closing at once could reset the
  // connection before the client reads why).
  if (c.writer.flush(c.sock) && c.state == State::kClosing) ::shutdown(c.sock.fd(), SHUT_WR);
}

void FrameServer::expire() {
  std::vector<ConnId> late;
  const Clock::time_point now = Clock::now();
  for (ConnId id : timed_) {
    if (conns_.at(id)->deadline.at() <= now) late.push_back(id);
  }
  for (ConnId id : late) {
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

void FrameServer::close(ConnId id, const std::string& reason, bool warn) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  const bool ready = it->second->state == State::kReady;
  if (warn) {
    spdlog::warn("{}: closing client {}: {}", who_, it->second->peer, reason);
  } else {
    spdlog::debug("{}: client {} left", who_, it->second->peer);
  }
  if (it->second->watched) ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, it->second->sock.fd(), nullptr);
  timed_.erase(id);
  handshaking_.erase(id);
  conns_.erase(it);
  if (ready) handler_.on_closed(id);
}

}  // namespace cohort::net
