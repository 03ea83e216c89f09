#include "cohort/comm/transport/tcp_pair.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "cohort/base/error.h"

namespace cohort::comm::transport {
namespace {

bool is_lost(int err) {
  return err == EPIPE || err == ECONNRESET || err == ENOTCONN || err == ETIMEDOUT;
}

}  // namespace

std::string_view kind_name(Kind k) {
  return k == Kind::Shm ? "shm" : "tcp";
}

TcpPair::TcpPair(int peer, net::Socket sock) : Pair(peer), sock_(std::move(sock)) {
  sock_.set_nonblocking(true);
  sock_.set_nodelay(true);
}

size_t TcpPair::send_some(const iovec* iov, int n, Delivery) {
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(iov);
  msg.msg_iovlen = static_cast<size_t>(n);
  for (;;) {
    ssize_t rc = ::sendmsg(sock_.fd(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (rc >= 0) return static_cast<size_t>(rc);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    const int err = errno;
    if (is_lost(err)) throw PeerLostError(peer(), std::string("send: ") + std::strerror(err));
    throw SystemError("send to rank " + std::to_string(peer()), err);
  }
}

size_t TcpPair::recv_some(void* p, size_t n) {
  for (;;) {
    ssize_t rc = ::recv(sock_.fd(), p, n, MSG_DONTWAIT);
    if (rc > 0) return static_cast<size_t>(rc);
    if (rc == 0) throw PeerLostError(peer(), "connection closed by peer");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    const int err = errno;
    if (is_lost(err)) throw PeerLostError(peer(), std::string("recv: ") + std::strerror(err));
    throw SystemError("recv from rank " + std::to_string(peer()), err);
  }
}

bool TcpPair::watch(Direction dir, bool /*arm*/, pollfd* pfd) {
  *pfd = {sock_.fd(), static_cast<short>(dir == Direction::Send ? POLLOUT : POLLIN), 0};
  return false;
}

bool TcpPair::woke(Direction dir, short revents) {
  const short want = dir == Direction::Send ? POLLOUT : POLLIN;
  return (revents & (want | POLLHUP | POLLERR)) != 0;
}

}  // namespace cohort::comm::transport
