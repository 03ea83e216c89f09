// Test helper: a world of ranks as threads in one process, connected over loopback through a
// MemoryStore, like real ranks in separate processes.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cohort/comm/communicator.h"
#include "cohort/store/memory_store.h"

namespace cohort::comm::testing {

inline CommConfig test_config(int rank, int size) {
  CommConfig c;
  c.rank = rank;
  c.size = size;
  c.token = "test-token";
  c.timeout = std::chrono::seconds(30);
  c.chunk_bytes = 256;
  return c;
}

// Which transports carry a test world's pairs (every rank is on this host): all TCP, all shared
// memory, or a mix in which odd ranks refuse shared memory, so that a pair with an odd rank is TCP
// and the others shared memory, and a ring waits on both kinds at once. Hosts: the ranks say they
// are on two hosts (CommConfig::host_id), even ranks on one and odd ranks on the other, so that
// pairs within a host are shared memory, pairs across TCP, and Auto picks the hierarchical
// allreduce; odd worlds have hosts of different sizes, and neither host's ranks are contiguous.
// Lazy: the same two hosts, every pair connected on first use (CommConfig::connect_all_up_to), as
// in a world too large for a full mesh. Hmac, Gmac: the same two hosts with every data frame
// sealed (CommConfig::integrity), over shared memory and TCP. Hosts and Gmac copy every
// collective's frame between ranks of one host once (CommConfig::shm_single_copy_bytes), the
// others through the shared-memory rings. Every world reduces what arrives over shared memory
// straight out of the ring (CommConfig::shm_fold_bytes) whatever the segment's size, where
// nothing else prevents it (a sealed frame is checked first, a single copy lands in scratch).
enum class Wires { Tcp, Shm, Mixed, Hosts, Lazy, Hmac, Gmac };

inline std::string wires_name(Wires w) {
  switch (w) {
    case Wires::Tcp:
      return "tcp";
    case Wires::Shm:
      return "shm";
    case Wires::Mixed:
      return "mixed";
    case Wires::Hosts:
      return "hosts";
    case Wires::Lazy:
      return "lazy";
    case Wires::Hmac:
      return "hmac";
    case Wires::Gmac:
      return "gmac";
  }
  return "?";
}

inline void use_wires(CommConfig& c, Wires w) {
  if (w == Wires::Tcp) c.transport = Transport::Tcp;
  if (w == Wires::Shm) c.transport = Transport::Shm;
  if (w == Wires::Mixed) c.transport = c.rank % 2 ? Transport::Tcp : Transport::Auto;
  if (w == Wires::Hosts || w == Wires::Lazy || w == Wires::Hmac || w == Wires::Gmac) {
    c.host_id = c.rank % 2 ? "odd" : "even";
  }
  if (w == Wires::Lazy) c.connect_all_up_to = 1;
  if (w == Wires::Hmac) c.integrity = Integrity::Hmac;
  if (w == Wires::Gmac) c.integrity = Integrity::Gmac;
  if (w == Wires::Hosts || w == Wires::Gmac) c.shm_single_copy_bytes = 1;
  c.shm_fold_bytes = 1;
}

// Runs `fn` and returns what it threw (nullptr if nothing).
template <typename F>
std::exception_ptr caught(F&& fn) {
  try {
    fn();
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

// The message of what `e` holds ("" for nothing).
inline std::string message_of(std::exception_ptr e) {
  try {
    if (e) std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  }
  return "";
}

// Runs fn(rank) on `n` threads at once and rethrows the first exception any of them raised.
inline void on_threads(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  std::mutex mu;
  std::exception_ptr first;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        std::lock_guard lk(mu);
        if (!first) first = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

class World {
 public:
  // `tweak` may change each rank's config before its communicator is created.
  explicit World(int n, const std::function<void(CommConfig&)>& tweak = {})
      : World(n, Wires::Shm, tweak) {}
  World(int n, Wires wires, const std::function<void(CommConfig&)>& tweak = {}) : comms_(n) {
    on_threads(n, [&](int r) {
      CommConfig c = test_config(r, n);
      use_wires(c, wires);
      if (tweak) tweak(c);
      comms_[static_cast<size_t>(r)] = Communicator::create(store_, c);
    });
  }
  int size() const { return static_cast<int>(comms_.size()); }
  Communicator& operator[](int r) { return *comms_[static_cast<size_t>(r)]; }
  std::unique_ptr<Communicator>& slot(int r) { return comms_[static_cast<size_t>(r)]; }
  store::MemoryStore& store() { return store_; }
  // Runs fn(rank, communicator) on every rank at once.
  void run(const std::function<void(int, Communicator&)>& fn) {
    on_threads(size(), [&](int r) { fn(r, *comms_[static_cast<size_t>(r)]); });
  }

 private:
  store::MemoryStore store_;  // declared first: the communicators keep a reference to it
  std::vector<std::unique_ptr<Communicator>> comms_;
};

}  // namespace cohort::comm::testing
