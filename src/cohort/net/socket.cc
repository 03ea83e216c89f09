#include "cohort/net/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "cohort/base/error.h"

namespace cohort::net {

std::string Endpoint::str() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

Endpoint Endpoint::parse(const std::string& s) {
  auto colon = s.rfind(':');
  if (colon == std::string::npos || colon + 1 == s.size()) {
    throw ConfigError("bad address '" + s + "': expected HOST:PORT");
  }
  std::string host = s.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  } else if (host.find_first_of("[]:") != std::string::npos) {
    // "::1:80" is ambiguous: IPv6 hosts must be bracketed.
    throw ConfigError("bad address '" + s + "': write IPv6 hosts in brackets, e.g. [::1]:29500");
  }
  std::string port_s = s.substr(colon + 1);
  // Digits only: stoul alone would accept " 80", "+80" and "-1".
  if (port_s.size() > 5 || port_s.find_first_not_of("0123456789") != std::string::npos) {
    throw ConfigError("bad port in address '" + s + "'");
  }
  unsigned long port = std::stoul(port_s);
  if (port > 65535) throw ConfigError("port out of range in address '" + s + "'");
  if (host.empty()) host = "127.0.0.1";
  return Endpoint{host, static_cast<uint16_t>(port)};
}

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

void Socket::shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

namespace {

struct AddrInfo {
  addrinfo* ai = nullptr;
  ~AddrInfo() {
    if (ai) freeaddrinfo(ai);
  }
};

AddrInfo resolve(const std::string& host, uint16_t port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  AddrInfo res;
  std::string port_s = std::to_string(port);
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port_s.c_str(), &hints, &res.ai);
  if (rc != 0) {
    throw Error("cannot resolve '" + host + "': " + gai_strerror(rc));
  }
  return res;
}

}  // namespace

Socket Socket::connect(const Endpoint& ep, Deadline deadline) {
  auto backoff = Millis(5);
  for (;;) {
    AddrInfo res = resolve(ep.host, ep.port, false);
    int last_err = 0;
    for (addrinfo* a = res.ai; a; a = a->ai_next) {
      Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
      if (!s.valid()) throw SystemError("socket", errno);
      s.set_nonblocking(true);
      int rc = ::connect(s.fd(), a->ai_addr, a->ai_addrlen);
      if (rc != 0 && errno != EINPROGRESS) {
        last_err = errno;
        continue;
      }
      if (rc != 0) {
        if (!wait_fd(s.fd(), POLLOUT, deadline)) {
          throw TimeoutError("timed out connecting to " + ep.str());
        }
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) {
          last_err = err;
          continue;
        }
      }
      s.set_nonblocking(false);
      s.set_nodelay(true);
      return s;
    }
    if (last_err != ECONNREFUSED && last_err != ETIMEDOUT && last_err != EHOSTUNREACH &&
        last_err != ENETUNREACH && last_err != ECONNRESET) {
      throw SystemError("connect to " + ep.str(), last_err);
    }
    if (deadline.expired()) {
      throw TimeoutError("timed out connecting to " + ep.str() + " (" + std::strerror(last_err) +
                         ")");
    }
    std::this_thread::sleep_for(std::min(backoff, deadline.remaining()));
    backoff = std::min(backoff * 2, Millis(200));
  }
}

void Socket::set_nodelay(bool on) {
  int v = on ? 1 : 0;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &v, sizeof(v));
}

void Socket::set_nonblocking(bool on) {
  int flags = fcntl(fd_, F_GETFL, 0);
  if (flags < 0) throw SystemError("fcntl(F_GETFL)", errno);
  flags = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (fcntl(fd_, F_SETFL, flags) < 0) throw SystemError("fcntl(F_SETFL)", errno);
}

void Socket::set_buffer_sizes(int bytes) {
  setsockopt(fd_, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
  setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
}

void Socket::set_keepalive(int idle_s, int interval_s, int count) {
  int on = 1;
  setsockopt(fd_, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
  setsockopt(fd_, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof(idle_s));
  setsockopt(fd_, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof(interval_s));
  setsockopt(fd_, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
}

std::string Socket::peer_address() const {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getpeername(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof(host), serv, sizeof(serv),
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "?";
  }
  return Endpoint{host, static_cast<uint16_t>(std::atoi(serv))}.str();
}

bool wait_fd(int fd, short events, Deadline deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, deadline.poll_timeout_ms());
    if (rc > 0) return true;
    if (rc == 0) {
      if (deadline.expired()) return false;
      continue;
    }
    if (errno != EINTR) throw SystemError("poll", errno);
  }
}

size_t Socket::send_some(const void* data, size_t n) {
  for (;;) {
    ssize_t rc = ::send(fd_, data, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (rc >= 0) return static_cast<size_t>(rc);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    if (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN || errno == ETIMEDOUT) {
      throw PeerLostError(
          -1, "connection to " + peer_address() + " lost while sending: " + std::strerror(errno));
    }
    throw SystemError("send", errno);
  }
}

size_t Socket::recv_some(void* data, size_t n) {
  if (n == 0) return 0;
  for (;;) {
    ssize_t rc = ::recv(fd_, data, n, MSG_DONTWAIT);
    if (rc > 0) return static_cast<size_t>(rc);
    if (rc == 0) throw PeerLostError(-1, "connection closed by peer " + peer_address());
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    if (errno == ECONNRESET || errno == ENOTCONN || errno == ETIMEDOUT || errno == EPIPE) {
      throw PeerLostError(
          -1, "connection to " + peer_address() + " lost while receiving: " + std::strerror(errno));
    }
    throw SystemError("recv", errno);
  }
}

void Socket::send_all(const void* data, size_t n, Deadline deadline) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    size_t k = send_some(p, n);
    if (k == 0) {
      if (!wait_fd(fd_, POLLOUT, deadline))
        throw TimeoutError("timed out sending to " + peer_address());
      continue;
    }
    p += k;
    n -= k;
  }
}

void Socket::recv_all(void* data, size_t n, Deadline deadline) {
  auto* p = static_cast<uint8_t*>(data);
  while (n > 0) {
    size_t k = recv_some(p, n);
    if (k == 0) {
      if (!wait_fd(fd_, POLLIN, deadline))
        throw TimeoutError("timed out receiving from " + peer_address());
      continue;
    }
    p += k;
    n -= k;
  }
}

Listener Listener::bind(const std::string& host, uint16_t port, int backlog) {
  AddrInfo res = resolve(host, port, true);
  int last_err = 0;
  for (addrinfo* a = res.ai; a; a = a->ai_next) {
    Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!s.valid()) throw SystemError("socket", errno);
    int on = 1;
    setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    if (::bind(s.fd(), a->ai_addr, a->ai_addrlen) != 0 || ::listen(s.fd(), backlog) != 0) {
      last_err = errno;
      continue;
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    getsockname(s.fd(), reinterpret_cast<sockaddr*>(&ss), &len);
    Listener l;
    l.port_ = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                             : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    l.host_ = host;
    s.set_nonblocking(true);
    l.sock_ = std::move(s);
    return l;
  }
  throw SystemError("bind " + host + ":" + std::to_string(port), last_err);
}

Socket Listener::accept(Deadline deadline) {
  for (;;) {
    int fd = ::accept4(sock_.fd(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      Socket s(fd);
      s.set_nodelay(true);
      return s;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) throw SystemError("accept", errno);
    if (!wait_fd(sock_.fd(), POLLIN, deadline)) {
      throw TimeoutError("timed out waiting for a connection on port " + std::to_string(port_));
    }
  }
}

std::string local_address_towards(const std::string& host) {
  AddrInfo res = resolve(host, 9, false);
  int last_err = 0;
  for (addrinfo* ai = res.ai; ai; ai = ai->ai_next) {
    Socket s(::socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!s.valid() || ::connect(s.fd(), ai->ai_addr, ai->ai_addrlen) != 0) {
      last_err = errno;
      continue;
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    if (getsockname(s.fd(), reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
      last_err = errno;
      continue;
    }
    char text[INET6_ADDRSTRLEN] = {};
    const void* addr =
        ss.ss_family == AF_INET6
            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr)
            : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&ss)->sin_addr);
    if (inet_ntop(ss.ss_family, addr, text, sizeof(text))) return text;
    last_err = errno;
  }
  throw SystemError("no route from this host to " + host, last_err);
}

}  // namespace cohort::net
