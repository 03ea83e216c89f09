#include "cohort/comm/mesh_doorman.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "cohort/base/error.h"

namespace cohort::comm {

Doorman::Doorman(const CommConfig& o, std::string me, net::Listener listener)
    : o_(o),
      me_(std::move(me)),
      listener_(std::move(listener)),
      silence_ms_(o.handshake_timeout.count()) {}

void Doorman::drop(Pending& p, const std::string& why) const {
  spdlog::warn("communicator (rank {}): closed connection from {}: {}", o_.rank, p.from, why);
  p.sock.close();
}

void Doorman::drop_all(const std::string& why) {
  for (auto& p : pending_) drop(p, why);
  pending_.clear();
}

bool Doorman::advance(Pending& p, const OnPeer& on_peer) {
  try {
    if (!p.writer.flush(p.sock)) return false;
    while (!p.accepted && p.reader.read(p.sock, net::kMaxHandshakeFrame)) {
      net::Frame f = p.reader.take();
      if (!p.challenged) {
        p.writer.push(net::MsgType::kChallenge, p.hs.on_hello(f));
        p.challenged = true;
      } else {
        try {
          p.hs.on_response(f);
        } catch (const AuthError&) {
          p.writer.push(net::MsgType::kReject, {});
          p.writer.flush(p.sock);  // best effort: tell the client before closing
          throw;
        }
        p.writer.push(net::MsgType::kAccept, {});
        p.accepted = true;
      }
      if (!p.writer.flush(p.sock)) return false;
    }
    if (!p.accepted || !p.writer.empty()) return false;
    const std::string refused = on_peer(p.hs.client_info(), p.hs.session(), p.sock, p.from);
    if (!refused.empty()) drop(p, refused);
  } catch (const std::exception& e) {
    drop(p, e.what());
  }
  return true;
}

void Doorman::poll_once(Deadline until, int wake_fd, const OnPeer& on_peer) {
  std::vector<pollfd> fds;
  fds.push_back(pollfd{listener_.fd(), POLLIN, 0});
  fds.push_back(pollfd{wake_fd, POLLIN, 0});  // poll ignores a negative descriptor
  Deadline wake = until;
  const std::chrono::milliseconds silence(silence_ms_.load(std::memory_order_relaxed));
  const auto lifetime = silence * kHandshakeLifetimes;
  for (auto& p : pending_) {
    const short ev = static_cast<short>(POLLIN | (p.writer.empty() ? 0 : POLLOUT));
    fds.push_back({p.sock.fd(), ev, 0});
    wake = wake.earlier(Deadline(std::min(p.heard + silence, p.arrived + lifetime)));
  }
  const int rc = ::poll(fds.data(), fds.size(), wake.poll_timeout_ms());
  if (rc < 0 && errno != EINTR) throw SystemError("poll", errno);

  // A connection is timed from when it was last heard from, not from its arrival: while an
  // earlier peer's pair is being set up (on_peer), the others' bytes wait here unread, and a
  // peer whose turn on a crowded host's CPUs comes late is still a peer. What bounds a connection
  // that keeps sending without finishing is its lifetime.
  std::deque<Pending> still;
  for (size_t i = 0; i < pending_.size(); ++i) {
    Pending& p = pending_[i];
    if (rc > 0 && fds[i + 2].revents != 0) {
      p.heard = Clock::now();
      if (advance(p, on_peer)) continue;
    }
    const auto now = Clock::now();
    if (now >= p.heard + silence) {
      drop(p, "silent for " + std::to_string(silence.count()) + " ms during the handshake");
      continue;
    }
    if (now >= p.arrived + lifetime) {
      drop(p, "no handshake within " + std::to_string(lifetime.count()) + " ms");
      continue;
    }
    still.push_back(std::move(p));
  }
  pending_ = std::move(still);
  if (rc > 0 && (fds[0].revents & POLLIN)) accept_new();
}

void Doorman::accept_new() {
  for (;;) {
    const int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      // Out of descriptors and the like: back off instead of spinning.
      spdlog::warn("communicator (rank {}): accept failed: {}", o_.rank, std::strerror(errno));
      return;
    }
    net::Socket s(fd);
    if (pending_.size() >= std::max<size_t>(max_pending_, 32)) {
      drop(pending_.front(), "too many unauthenticated connections");
      pending_.pop_front();
    }
    std::string from = s.peer_address();
    const auto now = Clock::now();
    pending_.push_back(Pending{.sock = std::move(s),
                               .arrived = now,
                               .heard = now,
                               .from = std::move(from),
                               .hs = net::ServerHandshake(o_.token, me_)});
  }
}

}  // namespace cohort::comm
