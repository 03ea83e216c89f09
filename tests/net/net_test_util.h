// Helpers shared by the net tests: connected socket pairs and timing.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <utility>

#include "cohort/base/clock.h"
#include "cohort/net/socket.h"

namespace cohort::net::testing {

// Two connected loopback TCP sockets (a real TCP connection, not a socketpair).
inline std::pair<Socket, Socket> tcp_pair() {
  Listener l = Listener::bind("127.0.0.1", 0);
  Socket a = Socket::connect({"127.0.0.1", l.port()}, Deadline::after(Millis(5000)));
  Socket b = l.accept(Deadline::after(Millis(5000)));
  return {std::move(a), std::move(b)};
}

inline Millis since(Clock::time_point t0) {
  return std::chrono::duration_cast<Millis>(Clock::now() - t0);
}

}  // namespace cohort::net::testing
