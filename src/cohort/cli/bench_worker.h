// One rank of `cohort bench allreduce`: a process spawned by the bench launcher (bench.cc) that
// joins the launcher's store, builds a Communicator and runs the measurement of bench_method.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "cohort/cli/bench_method.h"
#include "cohort/comm/types.h"

namespace cohort::cli {

// Environment variable that carries the job token from the launcher to its ranks (never argv,
// which any local user can read in /proc).
inline constexpr const char* kBenchTokenEnv = "COHORT_BENCH_TOKEN";

// Fault drills, for the multi-process fault tests: rank `rank` issues its allreduce number
// `after_iters` (counting every allreduce of the run from 0) and then kills or stops itself while
// that collective is in flight.
enum class FaultKind { None, Kill, Stop };

struct FaultDrill {
  FaultKind kind = FaultKind::None;
  int rank = -1;
  int after_iters = 0;
};

// A "host" of the emulated cluster (scripts/netcluster.sh) that bench ranks run on: the network
// namespace a rank enters before it starts, and the address it listens on there.
struct BenchHost {
  std::string netns;
  std::string addr;
};

struct BenchOptions {
  int ranks = 2;
  std::vector<uint64_t> sizes;
  comm::Algorithm algorithm = comm::Algorithm::Auto;
  bench::MethodOptions method;
  std::chrono::milliseconds timeout{30000};
  // Communicator settings (CommConfig); 0 or negative: the communicator's default.
  uint64_t chunk_bytes = 0;
  long socket_buffer_bytes = -1;
  long remote_socket_buffer_bytes = -1;
  long ring_window = -1;
  long spin_us = -1;
  long yield_us = -1;
  long single_copy_bytes = -1;
  long fold_bytes = -1;
  comm::Transport transport = comm::Transport::Auto;
  comm::Integrity integrity = comm::Integrity::None;
  bool json = false;
  // Each rank bound to its own share of this process's CPUs when there are at most as many ranks
  // as CPUs (base/cpu_binding.h, mpirun's default); false: every rank unbound.
  bool bind_to_cpus = true;
  // The CPUs the launcher shared out among bound ranks (CommConfig::host_cpus); 0: not bound.
  int host_cpus = 0;
  FaultDrill fault;
  // Where the launcher's store listens (the ranks dial it); with `hosts`, an address of the
  // launcher's own namespace that the hosts' namespaces reach.
  std::string bind_host = "127.0.0.1";
  // Empty: every rank on this host, on loopback. Otherwise the ranks are spread over these hosts
  // in contiguous blocks of nearly equal size (bench_host_of), host by host.
  std::vector<BenchHost> hosts;
};

// Which of o.hosts rank r runs on.
inline size_t bench_host_of(const BenchOptions& o, int r) {
  return static_cast<size_t>(r) * o.hosts.size() / static_cast<size_t>(o.ranks);
}

// Store keys shared by the launcher and its ranks.
inline std::string bench_result_key(size_t size_index) {
  return "bench/result/" + std::to_string(size_index);
}
inline std::string bench_error_key(int rank) {
  return "bench/error/" + std::to_string(rank);
}

// Runs rank `rank`; returns the process exit status. An error is posted to the store under
// bench_error_key(rank) as "rank R failed: <kind> (<parties>): <message>" (printed to stderr if
// the store cannot be reached), and the process exits with status 1.
int run_bench_worker(const BenchOptions& options, int rank, const std::string& store_endpoint);

}  // namespace cohort::cli
