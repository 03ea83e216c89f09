// The transport layer: how bytes move between this rank and one peer.
//
// A Pair is one rank's end of a full-duplex byte stream to one peer. The exchange engine
// (exchange.cc) and every algorithm above it see only Pairs, so they run unchanged whichever
// transport carries a pair: TCP (tcp_pair.h) between any two ranks, shared memory (shm_pair.h)
// between two ranks of one host. The Mesh (mesh.h) sets the pairs up at rendezvous and decides
// which transport each one gets.
//
// Everything is non-blocking. Waiting goes through poll(2), so one wait can watch a TCP pair and a
// shared-memory pair at once (a ring sends to one neighbour and receives from another): a pair
// names the descriptor poll must watch for a direction, and for shared memory it also arms a
// doorbell that its peer rings when it moves the ring's other end.
//
// One thread at a time uses a pair, for both directions (the thread running the operation in
// flight); shutdown() alone may come from any thread.
#pragma once

#include <poll.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace cohort::comm::transport {

enum class Kind : uint8_t { Tcp, Shm };
std::string_view kind_name(Kind k);

enum class Direction : uint8_t { Send, Recv };

// How the peer reads what a send_some() gives. Buffered: maybe only after this rank's operation
// has ended (a point-to-point send whose recv may be posted later), so the transport takes what
// it can hold without the peer. Rendezvous: while this rank sends (a collective's schedule pairs
// every send with the peer's receive), so the transport may hold the bytes until the peer has
// read them, and copy them once (shared memory's single copy).
enum class Delivery : uint8_t { Buffered, Rendezvous };

class Pair {
 public:
  explicit Pair(int peer) : peer_(peer) {}
  virtual ~Pair() = default;
  Pair(const Pair&) = delete;
  Pair& operator=(const Pair&) = delete;

  virtual Kind kind() const = 0;
  // The rank at the other end.
  int peer() const { return peer_; }

  // Takes bytes from the `n` buffers in order, as many as fit now; returns how many (0: none
  // fit). A short count means the pair is full: wait for Direction::Send before the next call,
  // which must pass the rest of the same bytes, unchanged, from the first one not taken to at
  // least the end of what this call was given: a transport may leave the bytes where they are
  // and count them as taken only once its peer has read them (shared memory's single copy).
  // Throws PeerLostError(peer(), reason) when the peer is gone, SystemError on other failures.
  virtual size_t send_some(const iovec* iov, int n, Delivery delivery) = 0;
  // The operation that gave send_some() its last bytes stopped before they were all taken (it
  // failed), and the bytes not taken are about to go away: the peer must not read them. The pair
  // is left to be shut down by the failure's handling.
  virtual void abandon_send() {}
  // Copies up to `n` bytes that have arrived into `p`; returns how many (0: none). A short count
  // means nothing more has arrived. Throws PeerLostError once the peer has closed and every byte
  // it sent has been read.
  virtual size_t recv_some(void* p, size_t n) = 0;

  // Receiving in place, for a transport whose arrived bytes lie in memory this rank reads (shared
  // memory's ring), so that a reduction can read them there instead of from a copy. peek() sets
  // *p to the next bytes that have arrived and returns how many follow contiguously there (0:
  // none now, or none to show in place: recv_some() then gets them, and reports a closed peer).
  // They stay where they are, unchanged, until consume(n) gives the first n of them (at most what
  // peek returned) back to the pair, and count as read only then. has_view() says whether peek
  // can ever show anything.
  virtual bool has_view() const { return false; }
  virtual size_t peek(const uint8_t** p) {
    *p = nullptr;
    return 0;
  }
  virtual void consume(size_t /*n*/) {}

  // Before a wait on `dir`: returns true when `dir` can make progress now (no wait needed).
  // Otherwise sets *pfd to what poll(2) must watch (fd < 0: nothing, which poll skips). With
  // `arm`, the wait is about to sleep: the pair makes sure that *pfd becomes ready once `dir` can
  // make progress; without it (a spinning wait), it only looks.
  virtual bool watch(Direction dir, bool arm, pollfd* pfd) = 0;
  // After the poll (or after watch() returned true): `revents` as poll(2) set them on the entry
  // watch() filled (0 if it did not run). Returns true when `dir` may make progress now. Every
  // armed watch() is followed by one woke().
  virtual bool woke(Direction dir, short revents) = 0;

  // Shuts both directions down: a thread waiting on the pair wakes up, its operation fails, and
  // the peer sees the pair close. Safe from any thread, more than once.
  virtual void shutdown() = 0;

 private:
  int peer_;
};

}  // namespace cohort::comm::transport
