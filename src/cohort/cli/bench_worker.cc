#include "cohort/cli/bench_worker.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include "cohort/base/clock.h"
#include "cohort/base/cpu_binding.h"
#include "cohort/base/error.h"
#include "cohort/base/log.h"
#include "cohort/comm/communicator.h"
#include "cohort/net/socket.h"
#include "cohort/store/tcp_store.h"

namespace cohort::cli {
namespace {

// "PeerLostError (peer rank 1): ..." — the kind first, then the parties the error names, so that
// a reader (and the fault tests) can tell what happened to whom without parsing the message.
std::string describe(const std::exception& e) {
  std::ostringstream os;
  if (auto* t = dynamic_cast<const comm::CollectiveTimeoutError*>(&e)) {
    os << "CollectiveTimeoutError (" << t->collective() << " #" << t->sequence()
       << ", ranks not heard from: [";
    for (size_t i = 0; i < t->missing_ranks().size(); ++i) {
      os << (i ? ", " : "") << t->missing_ranks()[i];
    }
    os << "])";
  } else if (auto* p = dynamic_cast<const PeerLostError*>(&e)) {
    os << "PeerLostError (peer rank " << p->rank() << ")";
  } else if (dynamic_cast<const TimeoutError*>(&e)) {
    os << "TimeoutError";
  } else if (dynamic_cast<const AbortedError*>(&e)) {
    os << "AbortedError";
  } else if (dynamic_cast<const AuthError*>(&e)) {
    os << "AuthError";
  } else if (dynamic_cast<const ProtocolError*>(&e)) {
    os << "ProtocolError";
  } else if (dynamic_cast<const SystemError*>(&e)) {
    os << "SystemError";
  } else if (dynamic_cast<const ConfigError*>(&e)) {
    os << "ConfigError";
  } else {
    os << "Error";
  }
  os << ": " << e.what();
  return os.str();
}

// Rank r contributes r+1+(i%7) at index i, so the sum over n ranks is n(n+1)/2 + n(i%7): small
// integers, exact in float32, and different at neighbouring indices so a misplaced block shows.
void fill_pattern(std::vector<float>& buf, int rank) {
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<float>(rank + 1 + i % 7);
}

void check_sum(const std::vector<float>& buf, int n, comm::Algorithm algo, uint64_t bytes) {
  for (size_t i = 0; i < buf.size(); ++i) {
    float want = static_cast<float>(n * (n + 1) / 2 + n * static_cast<int>(i % 7));
    if (buf[i] != want) {
      std::ostringstream os;
      os << "allreduce " << comm::algorithm_name(algo) << " of " << bytes
         << " bytes returned a wrong sum at element " << i << ": " << buf[i] << " (expected "
         << want << ")";
      throw Error(os.str());
    }
  }
}

class Worker {
 public:
  Worker(const BenchOptions& o, int rank, store::Store& store, std::string token,
         Clock::time_point started)
      : o_(o), rank_(rank), store_(store), token_(std::move(token)), started_(started) {}

  void run() {
    comm::CommConfig config;
    config.rank = rank_;
    config.size = o_.ranks;
    config.token = token_;
    config.timeout = o_.timeout;
    if (o_.chunk_bytes > 0) config.chunk_bytes = o_.chunk_bytes;
    if (o_.socket_buffer_bytes >= 0)
      config.socket_buffer_bytes = static_cast<int>(o_.socket_buffer_bytes);
    if (o_.remote_socket_buffer_bytes >= 0) {
      config.remote_socket_buffer_bytes = static_cast<int>(o_.remote_socket_buffer_bytes);
    }
    if (o_.ring_window >= 0) config.ring_window = static_cast<size_t>(o_.ring_window);
    if (o_.spin_us >= 0) config.spin_wait = std::chrono::microseconds(o_.spin_us);
    if (o_.yield_us >= 0) config.yield_wait = std::chrono::microseconds(o_.yield_us);
    if (o_.single_copy_bytes >= 0) {
      config.shm_single_copy_bytes = static_cast<size_t>(o_.single_copy_bytes);
    }
    if (o_.fold_bytes >= 0) config.shm_fold_bytes = static_cast<size_t>(o_.fold_bytes);
    config.transport = o_.transport;
    config.host_cpus = o_.host_cpus;
    config.integrity = o_.integrity;
    if (!o_.hosts.empty()) config.bind_host = o_.hosts[bench_host_of(o_, rank_)].addr;
    comm_ = comm::Communicator::create(store_, config);
    // The slowest rank's setup, from its start to a communicator that can run collectives.
    std::vector<double> setup{
        std::chrono::duration<double, std::milli>(Clock::now() - started_).count()};
    wait(comm_->allreduce({.dtype = DType::F64, .data = setup.data(), .count = 1},
                          {.op = comm::ReduceOp::Max}));
    setup_ms_ = setup[0];
    for (size_t s = 0; s < o_.sizes.size(); ++s) run_size(s);
    wait(comm_->barrier());
  }

 private:
  // The Work's own deadline is the communicator's; this one only guards against a collective
  // that never completes at all.
  void wait(const std::shared_ptr<comm::Work>& w) { w->wait(o_.timeout + std::chrono::seconds(5)); }

  // What carried rank 0's pairs: "tcp", "shm" or both ("shm+tcp").
  static std::string transport_used(const comm::CommStats& s) {
    if (s.shm_pairs > 0 && s.tcp_pairs > 0) return "shm+tcp";
    return s.shm_pairs > 0 ? "shm" : "tcp";
  }

  void run_size(size_t index) {
    const uint64_t bytes = o_.sizes[index];
    std::vector<float> buf(bytes / sizeof(float));
    const Buffer b{.dtype = DType::F32, .data = buf.data(), .count = buf.size()};
    const comm::AllreduceOptions opts{.op = comm::ReduceOp::Sum, .algorithm = o_.algorithm};

    // The benchmark must not measure a broken collective: check the result once per size.
    fill_pattern(buf, rank_);
    issue(b, opts);
    check_sum(buf, o_.ranks, o_.algorithm, bytes);

    // Timed iterations reduce zeros, so values never overflow.
    std::fill(buf.begin(), buf.end(), 0.0f);
    auto m = bench::measure(
        o_.method, [&] { issue(b, opts); },
        [&](std::vector<double>& v) {
          wait(comm_->allreduce({.dtype = DType::F64, .data = v.data(), .count = v.size()},
                                {.op = comm::ReduceOp::Max}));
        });
    if (rank_ == 0) {
      bench::Result r{.algorithm = std::string(comm::algorithm_name(o_.algorithm)),
                      .library = "cohort",
                      .transport = transport_used(comm_->stats()),
                      .ranks = o_.ranks,
                      .bytes = bytes,
                      .time_us = m.time_us,
                      .mean_us = m.mean_us,
                      .iters = m.iters,
                      .integrity = o_.integrity == comm::Integrity::None
                                       ? ""
                                       : std::string(comm::integrity_name(o_.integrity)),
                      .setup_ms = setup_ms_,
                      .cpus_per_rank = allowed_cpu_count()};
      store_.set(bench_result_key(index), store::to_bytes(bench::to_json(r)));
    }
  }

  // One allreduce to completion; the fault drill strikes while its collective is in flight.
  void issue(const Buffer& b, const comm::AllreduceOptions& opts) {
    auto w = comm_->allreduce(b, opts);
    if (o_.fault.kind != FaultKind::None && rank_ == o_.fault.rank &&
        issued_ == o_.fault.after_iters) {
      std::fprintf(stderr, "rank %d: fault drill: %s during allreduce #%d\n", rank_,
                   o_.fault.kind == FaultKind::Kill ? "SIGKILL" : "SIGSTOP", issued_);
      raise(o_.fault.kind == FaultKind::Kill ? SIGKILL : SIGSTOP);
    }
    ++issued_;
    wait(w);
  }

  const BenchOptions& o_;
  const int rank_;
  store::Store& store_;
  std::string token_;
  const Clock::time_point started_;
  std::unique_ptr<comm::Communicator> comm_;
  double setup_ms_ = -1;
  int issued_ = 0;
};

}  // namespace

int run_bench_worker(const BenchOptions& options, int rank, const std::string& store_endpoint) {
  const Clock::time_point started = Clock::now();
  log::set_context(rank);
  const char* token_env = std::getenv(kBenchTokenEnv);
  if (!token_env) {
    std::fprintf(stderr,
                 "rank %d failed: ConfigError: %s is not set (ranks are started by "
                 "'cohort bench allreduce')\n",
                 rank, kBenchTokenEnv);
    return 2;
  }
  const std::string token = token_env;
  unsetenv(kBenchTokenEnv);

  // Declared outside the try so that an error does not unwind (destroy) a failed communicator.
  std::unique_ptr<store::TcpStore> store;
  std::unique_ptr<Worker> worker;
  try {
    store = std::make_unique<store::TcpStore>(net::Endpoint::parse(store_endpoint), token,
                                              options.timeout);
    worker = std::make_unique<Worker>(options, rank, *store, token, started);
    worker->run();
    return 0;
  } catch (const std::exception& e) {
    // The launcher prints every rank's outcome from the store; stderr is the fallback.
    std::string line = "rank " + std::to_string(rank) + " failed: " + describe(e);
    bool posted = false;
    try {
      if (store) store->set(bench_error_key(rank), store::to_bytes(line));
      posted = store != nullptr;
    } catch (const std::exception&) {
    }
    if (!posted) std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
    // Skip destructors: a communicator in a failed state must not be able to hang the exit.
    _exit(1);
  }
}

}  // namespace cohort::cli
