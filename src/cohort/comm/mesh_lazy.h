// Internal to the mesh: a mesh that connects each pair on first use (worlds above
// CommConfig::connect_all_up_to).
//
// Rendezvous: every rank publishes its listener's address ("<prefix>/addr/<rank>"), its host
// identity, the CPUs it counts there and whether it would use shared memory
// ("<prefix>/joined/<rank>": "<host> cpus=2 shm=1"). Rank 0 waits for all of them and publishes
// every rank's host number, whether all of them would use shared memory and the ranks per CPU of
// the most crowded host ("<prefix>/world": "0 0 1 1 shm=1 per_cpu=1"); the others wait for that
// one key.
// So setup costs the store O(n) operations in all, and a rank that never joins is named by every
// rank.
//
// Connecting: the rank whose operation first needs a pair dials; a thread of the mesh (the
// acceptor) answers dials whatever the rank's own thread is doing, so two ranks never wait for
// each other to accept. After the handshake the accepting side sends its verdict: "ok" (this
// connection is the pair) or "dup". Two ranks that dial each other at once keep the connection
// dialled by the higher rank: the lower one's acceptor takes it, the higher one answers the lower
// one's dial "dup", and the lower one then waits for its acceptor to publish the pair. Then the
// pair agrees on its transport (make_pair: shared memory on one host, else TCP).
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cohort/comm/mesh.h"
#include "cohort/comm/mesh_doorman.h"

namespace cohort::comm {

class Mesh::Lazy {
 public:
  Lazy(Mesh& mesh, store::Store& store, const CommConfig& o);
  ~Lazy() { stop(); }

  // On the thread running the operation in flight.
  transport::Pair& connect(int r, Deadline deadline);

 private:
  // None: no connection; Dialing: this rank's thread dials; AwaitingPeer: the peer answered "dup"
  // and dials this rank; Accepting: the acceptor sets up the peer's connection; Ready: published.
  enum class State : uint8_t { None, Dialing, AwaitingPeer, Accepting, Ready };

  std::string key(const std::string& suffix) const { return o_.store_prefix + "/" + suffix; }
  void rendezvous(Deadline deadline);
  uint64_t pairs_of_host(int ranks) const;
  [[noreturn]] void never_joined(const std::string& why);
  void accept_loop();
  std::string on_peer(const std::string& info, const net::SessionKey& session, net::Socket& sock);
  transport::Pair& wait_for(int r, Deadline deadline, std::unique_lock<std::mutex>& lk);
  void stop();

  Mesh& mesh_;
  store::Store& store_;
  const CommConfig o_;
  const std::string me_;
  // What sizes the shared-memory rings this rank creates (make_pair): an estimate of the pairs of
  // its host, from the world size until the rendezvous tells how many ranks share the host (the
  // acceptor may take a dial before that).
  std::atomic<uint64_t> local_pairs_{0};
  std::unique_ptr<Doorman> door_;
  int wake_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::condition_variable cv_;  // a pair became ready or a dial failed
  std::vector<State> state_;
  std::thread thread_;
};

}  // namespace cohort::comm
