// TCP sockets with RAII ownership and deadline-bounded blocking helpers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "cohort/base/clock.h"

namespace cohort::net {

// Host and port, e.g. "127.0.0.1:29500". Parses "[::1]:80" too.
struct Endpoint {
  std::string host;
  uint16_t port = 0;
  std::string str() const;
  static Endpoint parse(const std::string& s);  // throws ConfigError
};

// Owns one file descriptor. Move-only.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { close(); }
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  // Connects, retrying refused connections until the deadline (the peer may not be listening yet).
  static Socket connect(const Endpoint& ep, Deadline deadline);

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void close();
  // Shuts both directions down without closing the descriptor: unblocks any thread polling it.
  void shutdown();

  void set_nodelay(bool on = true);
  void set_nonblocking(bool on = true);
  // Sets SO_SNDBUF and SO_RCVBUF (the kernel may cap them).
  void set_buffer_sizes(int bytes);
  void set_keepalive(int idle_s, int interval_s, int count);
  std::string peer_address() const;

  // Blocking with deadline (the socket may be blocking or not; both use poll).
  // Throw TimeoutError on deadline, PeerLostError(-1, ...) when the peer closes or resets.
  void send_all(const void* data, size_t n, Deadline deadline);
  void recv_all(void* data, size_t n, Deadline deadline);

  // Non-blocking primitives: return bytes moved, 0 if the call would block.
  // recv_some throws PeerLostError on orderly close (0 bytes read) or reset.
  size_t send_some(const void* data, size_t n);
  size_t recv_some(void* data, size_t n);

 private:
  int fd_ = -1;
};

class Listener {
 public:
  Listener() = default;
  // Binds host:port (port 0 picks a free one) and listens. Sets SO_REUSEADDR.
  static Listener bind(const std::string& host, uint16_t port, int backlog = 128);

  // Waits for one connection until the deadline; throws TimeoutError.
  Socket accept(Deadline deadline);
  uint16_t port() const { return port_; }
  const std::string& host() const { return host_; }
  int fd() const { return sock_.fd(); }
  void close() { sock_.close(); }
  void shutdown() { sock_.shutdown(); }

 private:
  Socket sock_;
  std::string host_;
  uint16_t port_ = 0;
};

// Waits until fd is readable (events=POLLIN) or writable (POLLOUT). Returns false on timeout.
bool wait_fd(int fd, short events, Deadline deadline);

// The address of this host's interface that its routes use to reach `host` (how peers on that
// network can reach this host): the local end of a UDP socket connected to it, which sends
// nothing. Error when `host` does not resolve or no route leads there.
std::string local_address_towards(const std::string& host);

}  // namespace cohort::net
