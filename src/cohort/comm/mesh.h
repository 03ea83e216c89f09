// Mesh: one transport pair to every other rank, set up through the store over authenticated TCP.
//
// Rendezvous: every rank listens on bind_host:0 and publishes "host:port" under
// "<prefix>/addr/<rank>". Rank i dials every rank j < i and accepts every rank j > i, so each pair
// has exactly one connection. Both ends prove the job token (net::handshake_*) and state their
// rank and world size, which the other end checks: a wrong size, an unexpected rank or a second
// connection from the same rank is rejected.
//
// Each side also states its host identity (transport/host_identity.h) and whether it would use
// shared memory. A pair of ranks on one host that both would then agrees on a shared-memory
// segment over its new connection (mesh_shm.cc) and becomes a ShmPair, the connection staying as
// its doorbell; every other pair is a TcpPair over the connection.
//
// While accepting, anything that is not a well-behaved peer (garbage, a wrong token, a connection
// that says nothing) costs one log line and is closed; accepting goes on. Pending connections are
// bounded in number and each has a short handshake deadline, so no client can make setup crash,
// hang past its deadline, or hold unbounded memory.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "cohort/comm/communicator.h"
#include "cohort/comm/transport/pair.h"
#include "cohort/comm/types.h"
#include "cohort/net/socket.h"
#include "cohort/store/store.h"

namespace cohort::comm {

// A send/recv message that arrived before the matching recv was issued.
struct StashedMessage {
  uint32_t tag = 0;
  uint8_t dtype = 0;
  std::vector<uint8_t> payload;
};

class Mesh {
 public:
  // Blocks until connected to every peer; TimeoutError names the ranks that never connected.
  // Uses the rendezvous, handshake, socket and transport settings of `config`.
  static Mesh connect(store::Store& store, const CommConfig& config);
  // A single rank: no sockets at all.
  Mesh() = default;
  Mesh(Mesh&&) = default;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Ranks of this mesh on this host, this one included (peers whose connection is local).
  int ranks_on_this_host() const { return ranks_on_this_host_; }
  // The host of rank r: ranks that stated the same host identity in the handshake share one, and
  // hosts are numbered 0, 1, ... in the order of their lowest rank.
  int host_of(int r) const { return host_of_[static_cast<size_t>(r)]; }
  int hosts() const { return hosts_; }
  // The pair to peer r (r != rank()).
  transport::Pair& pair(int r) { return *pairs_[static_cast<size_t>(r)]; }
  // How many peers each transport carries.
  int pairs_of(transport::Kind k) const;
  std::deque<StashedMessage>& stash(int r) { return stash_[static_cast<size_t>(r)]; }
  size_t stash_limit() const { return stash_limit_; }
  // Bytes of the messages in stash(r).
  size_t stashed_bytes(int r) const {
    size_t n = 0;
    for (const auto& m : stash_[static_cast<size_t>(r)]) n += m.payload.size();
    return n;
  }

  // Shuts every connection down (both directions) without closing the descriptors, so a thread
  // blocked in poll on one of them wakes up. Safe to call from any thread, more than once.
  void shutdown_all();

 private:
  int rank_ = 0;
  int size_ = 1;
  int ranks_on_this_host_ = 1;
  std::vector<int> host_of_{0};
  int hosts_ = 1;
  std::vector<std::unique_ptr<transport::Pair>> pairs_;
  std::vector<std::deque<StashedMessage>> stash_;
  size_t stash_limit_ = 64 << 20;
};

}  // namespace cohort::comm
