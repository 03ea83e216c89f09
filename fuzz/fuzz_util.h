// Helpers shared by the fuzz targets: the input delivered as a peer would send it, over a real
// socket pair, so that the decoders under test read it exactly as they read a connection.
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "cohort/net/socket.h"

namespace cohort::fuzz {

// A connected pair: `ours` to read from and write to, `peer` already written with data[0, n)
// and shut for writing - it has said all it will say, and takes what `ours` writes (up to the
// socket buffer). Inputs are bounded by the fuzz targets' -max_len (below the socket buffer), so
// the write never blocks.
struct Conversation {
  net::Socket ours;
  net::Socket peer;
};
inline Conversation conversation(const uint8_t* data, size_t n) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) __builtin_trap();
  int size = 1 << 20;
  ::setsockopt(fds[1], SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
  ::setsockopt(fds[0], SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
  size_t off = 0;
  while (off < n) {
    ssize_t k = ::write(fds[1], data + off, n - off);
    if (k <= 0) __builtin_trap();
    off += static_cast<size_t>(k);
  }
  ::shutdown(fds[1], SHUT_WR);
  return {net::Socket(fds[0]), net::Socket(fds[1])};
}

// Only the reading end: a reader sees exactly data[0, n) and then an orderly close.
inline net::Socket delivered(const uint8_t* data, size_t n) {
  Conversation c = conversation(data, n);
  c.peer.close();
  return std::move(c.ours);
}

}  // namespace cohort::fuzz
