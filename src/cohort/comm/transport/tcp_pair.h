// The TCP transport: a Pair over one non-blocking, TCP_NODELAY connection. Waits watch the socket
// itself; a peer that dies is seen as the connection closing or resetting.
#pragma once

#include "cohort/comm/transport/pair.h"
#include "cohort/net/socket.h"

namespace cohort::comm::transport {

class TcpPair final : public Pair {
 public:
  // `sock` is connected and authenticated; it is made non-blocking here.
  TcpPair(int peer, net::Socket sock);

  Kind kind() const override { return Kind::Tcp; }
  size_t send_some(const iovec* iov, int n, Delivery delivery) override;
  size_t recv_some(void* p, size_t n) override;
  bool watch(Direction dir, bool arm, pollfd* pfd) override;
  bool woke(Direction dir, short revents) override;
  void shutdown() override { sock_.shutdown(); }

 private:
  net::Socket sock_;
};

}  // namespace cohort::comm::transport
