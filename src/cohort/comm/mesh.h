// Mesh: a transport pair to each peer a rank talks to, set up through the store over
// authenticated TCP.
//
// Two ways to connect, by world size (CommConfig::connect_all_up_to):
//   Full mesh, for small worlds: every rank listens on bind_host:0 and publishes "host:port" under
//     "<prefix>/addr/<rank>"; rank i dials every rank j < i and accepts every rank j > i, so each
//     pair has exactly one connection, all made before connect() returns.
//   On first use, for large worlds, where n^2 connections would not fit: a rank connects to a peer
//     when an operation first needs it (a ring touches 2 peers, halving-doubling 2 log2(n)), so a
//     rank of a world of 1,024 holds a few dozen connections, not 1,023. connect() returns once
//     every rank has joined the rendezvous; a thread of the mesh accepts peers' connections from
//     then on, whatever the rank's own thread is doing.
// Both ends prove the job token (net::handshake_*) and state their rank, world size, host identity
// (transport/host_identity.h or CommConfig::host_id) and whether they would use shared memory; the
// other end checks them. A pair of ranks on one host that both would agrees on a shared-memory
// segment over its new connection (mesh_pairs.cc) and becomes a ShmPair, the connection staying as
// its doorbell; every other pair is a TcpPair over the connection.
//
// While accepting, anything that is not a well-behaved peer costs one log line and is closed
// (mesh_doorman.h): no client can make a rank crash, hang past its deadline, or hold unbounded
// memory.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cohort/base/clock.h"
#include "cohort/comm/communicator.h"
#include "cohort/comm/frame_seal.h"
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
  // Full mesh: blocks until connected to every peer; TimeoutError names the ranks that never
  // connected. On first use: blocks until every rank has joined; TimeoutError names the ranks that
  // never did. Uses the rendezvous, handshake, socket and transport settings of `config`.
  static std::unique_ptr<Mesh> connect(store::Store& store, const CommConfig& config);
  // A single rank: no sockets at all.
  Mesh();
  // Rank `rank` of a world whose rank r is on host host_of[r] (hosts numbered 0, 1, ... in the
  // order of their lowest rank), with no pair to anyone: what the simulator plans an operation
  // over (plan.h). pair() throws.
  Mesh(int rank, const std::vector<int>& host_of);
  ~Mesh();
  Mesh(const Mesh&) = delete;
  Mesh& operator=(const Mesh&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Ranks of this mesh on this host, this one included.
  int ranks_on_this_host() const { return ranks_on_this_host_; }
  // The host of rank r: ranks that stated the same host identity share one, and hosts are
  // numbered 0, 1, ... in the order of their lowest rank.
  int host_of(int r) const { return host_of_[static_cast<size_t>(r)]; }
  int hosts() const { return hosts_; }
  // Whether every rank of the world would put a pair on its host on shared memory (none was set to
  // Transport::Tcp): the same on every rank, so what Auto weighs (a pair that fell back to TCP
  // because /dev/shm is too small does not change it).
  bool shared_memory_everywhere() const { return shm_everywhere_; }
  // The ranks per CPU of the most crowded host, rounded up; more than 1 where some host holds more
  // ranks than the CPUs they share (each rank states the CPUs it counts at setup, and a host
  // counts its fewest): the same on every rank, so what Auto weighs.
  int ranks_per_cpu() const { return ranks_per_cpu_; }
  // The pair to peer r (r != rank()), connected first if it is not yet: StallError(r) when that
  // does not happen by `deadline`, PeerLostError(r) when the peer refuses, AbortedError after
  // shutdown_all(). Only the thread running the operation in flight calls it.
  transport::Pair& pair(int r, Deadline deadline) {
    transport::Pair* p = ready_[static_cast<size_t>(r)].load(std::memory_order_acquire);
    return p ? *p : connect_to(r, deadline);
  }
  // What seals the data frames to and from peer r (CommConfig::integrity), or null when they are
  // not sealed. Valid once pair(r) has returned, on the same thread.
  FrameSeal* seal(int r) const { return seals_[static_cast<size_t>(r)].get(); }
  // How many peers each transport carries now.
  int pairs_of(transport::Kind k) const;
  // Whether every pair was connected at setup (a full mesh).
  bool full() const { return lazy_ == nullptr; }
  std::deque<StashedMessage>& stash(int r) { return stash_[static_cast<size_t>(r)]; }
  size_t stash_limit() const { return stash_limit_; }
  // Bytes of the messages in stash(r).
  size_t stashed_bytes(int r) const {
    size_t n = 0;
    for (const auto& m : stash_[static_cast<size_t>(r)]) n += m.payload.size();
    return n;
  }

  // Shuts every connection down (both directions) without closing the descriptors, so a thread
  // blocked in poll on one of them wakes up, and refuses every connection after it. Safe to call
  // from any thread, more than once.
  void shutdown_all();

 private:
  class Lazy;  // connecting on first use (mesh_lazy.cc)
  friend class Lazy;

  transport::Pair& connect_to(int r, Deadline deadline);
  // Makes p the pair to r (under mu_), visible to pair() at once with the seal of its frames;
  // shut down if the mesh is.
  void publish(int r, std::unique_ptr<transport::Pair> p, std::unique_ptr<FrameSeal> seal);
  // host_of_, hosts_ and ranks_on_this_host_ from every rank's host identity.
  void set_hosts(const std::vector<std::string>& hosts);

  int rank_ = 0;
  int size_ = 1;
  int ranks_on_this_host_ = 1;
  std::vector<int> host_of_{0};
  int hosts_ = 1;
  bool shm_everywhere_ = false;
  int ranks_per_cpu_ = 1;
  mutable std::mutex mu_;  // pairs_, closed_ (ready_ is written under it)
  std::vector<std::unique_ptr<transport::Pair>> pairs_;
  std::vector<std::unique_ptr<FrameSeal>> seals_;  // written before ready_, read after it
  std::unique_ptr<std::atomic<transport::Pair*>[]> ready_;
  bool closed_ = false;
  std::vector<std::deque<StashedMessage>> stash_;
  size_t stash_limit_ = 64 << 20;
  std::unique_ptr<Lazy> lazy_;  // last: its thread stops before the pairs go
};

}  // namespace cohort::comm
