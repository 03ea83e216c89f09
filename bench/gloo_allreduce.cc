// Gloo's allreduce algorithms measured with Cohort's method (cohort/cli/bench_method.h).
//
//   gloo_allreduce --ranks N --sizes 4K,1M,64M [--algo ring,ring_chunked,halving_doubling,...]
//                  [--iters K] [--warmup W]
//
// Algorithms: the legacy classes (ring, ring_chunked, halving_doubling) and the current API
// (gloo/allreduce.h: current_ring, current_bcube), which is what PyTorch's ProcessGroupGloo runs.
//
// The process forks itself into N ranks (before any Gloo object exists, so no thread is forked).
// The ranks rendezvous through a gloo::rendezvous::FileStore in a fresh temporary directory and
// connect a full mesh over Gloo's TCP transport on 127.0.0.1. Rank 0 prints one JSON line per
// (algorithm, size) in the same shape as `cohort bench allreduce --json`. A rank that fails makes
// the launcher kill the others and exit non-zero; ranks die with the launcher (PR_SET_PDEATHSIG).
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cohort/cli/bench_method.h"
#include "cpus_of_this_process.h"

namespace {

namespace cb = cohort::bench;

struct Options {
  int ranks = 2;
  std::vector<uint64_t> sizes;
  std::vector<std::string> algos = {"ring", "ring_chunked", "halving_doubling", "current_ring",
                                    "current_bcube"};
  cb::MethodOptions method;
  std::chrono::seconds timeout{120};
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t c = s.find(',', pos);
    if (c == std::string::npos) c = s.size();
    out.push_back(s.substr(pos, c - pos));
    pos = c + 1;
  }
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  o.sizes = cb::parse_sizes("4K,64K,1M,16M,64M", sizeof(float));
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--ranks")
      o.ranks = std::stoi(value());
    else if (a == "--sizes")
      o.sizes = cb::parse_sizes(value(), sizeof(float));
    else if (a == "--algo")
      o.algos = split(value());
    else if (a == "--iters")
      o.method.iters = std::stoi(value());
    else if (a == "--warmup")
      o.method.warmup = std::stoi(value());
    else
      throw std::invalid_argument("unknown option " + a);
  }
  if (o.ranks < 1) throw std::invalid_argument("--ranks must be at least 1");
  for (const auto& a : o.algos) {
    if (a != "ring" && a != "ring_chunked" && a != "halving_doubling" && a != "current_ring" &&
        a != "current_bcube") {
      throw std::invalid_argument(
          "unknown algorithm '" + a +
          "' (ring, ring_chunked, halving_doubling, current_ring, current_bcube)");
    }
  }
  return o;
}

// Gloo's current API (gloo/allreduce.h), as PyTorch's ProcessGroupGloo calls it for allreduce:
// options naming the algorithm, the output buffer, the reduction and a tag that is new for every
// collective, then gloo::allreduce; the buffers are bound anew on every call, as there.
class CurrentApiAllreduce final : public gloo::Algorithm {
 public:
  CurrentApiAllreduce(const std::shared_ptr<gloo::Context>& ctx,
                      gloo::AllreduceOptions::Algorithm algorithm, float* data, int count)
      : gloo::Algorithm(ctx), algorithm_(algorithm), data_(data), count_(count) {}
  void run() override {
    gloo::AllreduceOptions opts(context_);
    opts.setAlgorithm(algorithm_);
    opts.setOutput(data_, static_cast<size_t>(count_));
    opts.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    opts.setTag(tag_++);
    gloo::allreduce(opts);
  }

 private:
  gloo::AllreduceOptions::Algorithm algorithm_;
  float* data_;
  int count_;
  uint32_t tag_ = 0;
};

std::unique_ptr<gloo::Algorithm> make_allreduce(const std::string& algo,
                                                const std::shared_ptr<gloo::Context>& ctx,
                                                float* data, int count) {
  std::vector<float*> ptrs{data};
  if (algo == "ring") return std::make_unique<gloo::AllreduceRing<float>>(ctx, ptrs, count);
  if (algo == "ring_chunked") {
    return std::make_unique<gloo::AllreduceRingChunked<float>>(ctx, ptrs, count);
  }
  if (algo == "current_ring") {
    return std::make_unique<CurrentApiAllreduce>(ctx, gloo::AllreduceOptions::Algorithm::RING, data,
                                                 count);
  }
  if (algo == "current_bcube") {
    return std::make_unique<CurrentApiAllreduce>(ctx, gloo::AllreduceOptions::Algorithm::BCUBE,
                                                 data, count);
  }
  return std::make_unique<gloo::AllreduceHalvingDoubling<float>>(ctx, ptrs, count);
}

// The ranks are not bound: bound to a CPU each, Gloo's current API (whose device thread then
// shares its caller's CPU) took 4 ms per 4 KiB allreduce here, and its users (PyTorch's
// ProcessGroupGloo under torchrun) run unbound.

// Element-wise max across ranks, with Gloo itself.
void max_across_ranks(const std::shared_ptr<gloo::Context>& ctx, std::vector<double>& v) {
  gloo::AllreduceRing<double> max(ctx, {v.data()}, static_cast<int>(v.size()),
                                  gloo::ReductionFunction<double>::max);
  max.run();
}

int run_rank(const Options& o, int rank, const std::string& store_dir) {
  const auto started = std::chrono::steady_clock::now();
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore file_store(store_dir);
  gloo::rendezvous::PrefixStore store("bench", file_store);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, o.ranks);
  ctx->setTimeout(o.timeout);
  ctx->connectFullMesh(store, device);
  // The slowest rank's setup: from its start to a connected context.
  std::vector<double> setup{
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started)
          .count()};
  max_across_ranks(ctx, setup);

  for (const auto& algo : o.algos) {
    for (uint64_t bytes : o.sizes) {
      const int count = static_cast<int>(bytes / sizeof(float));
      std::vector<float> buf(count);
      auto allreduce = make_allreduce(algo, ctx, buf.data(), count);

      // Correctness once per size: rank r contributes r+1+(i%7); the sum is known exactly.
      for (int i = 0; i < count; ++i) buf[i] = static_cast<float>(rank + 1 + i % 7);
      allreduce->run();
      const int n = o.ranks;
      for (int i = 0; i < count; ++i) {
        float want = static_cast<float>(n * (n + 1) / 2 + n * (i % 7));
        if (buf[i] != want) {
          std::fprintf(stderr, "gloo %s rank %d: wrong result at %d for %llu bytes: %g != %g\n",
                       algo.c_str(), rank, i, static_cast<unsigned long long>(bytes), buf[i], want);
          return 1;
        }
      }
      // Timed iterations reduce zeros, so values never overflow.
      std::fill(buf.begin(), buf.end(), 0.0f);
      auto m = cb::measure(
          o.method, [&] { allreduce->run(); },
          [&](std::vector<double>& v) { max_across_ranks(ctx, v); });
      if (rank == 0) {
        cb::Result r{.algorithm = algo,
                     .library = "gloo",
                     .transport = "tcp",
                     .ranks = n,
                     .bytes = bytes,
                     .time_us = m.time_us,
                     .mean_us = m.mean_us,
                     .iters = m.iters,
                     .setup_ms = setup[0],
                     .cpus_per_rank = cpus_of_this_process()};
        std::printf("%s\n", cb::to_json(r).c_str());
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    o = parse(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "gloo_allreduce: " << e.what() << "\n";
    return 2;
  }
  char tmpl[] = "/tmp/gloo-bench-XXXXXX";
  if (!mkdtemp(tmpl)) {
    std::perror("gloo_allreduce: mkdtemp");
    return 1;
  }
  const std::string dir = tmpl;
  const pid_t launcher = getpid();

  std::vector<pid_t> pids;
  for (int r = 0; r < o.ranks; ++r) {
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("gloo_allreduce: fork");
      for (pid_t p : pids) kill(p, SIGKILL);
      break;
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != launcher) _exit(1);
      int rc = 1;
      try {
        rc = run_rank(o, r, dir);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "gloo_allreduce rank %d: %s\n", r, e.what());
      }
      std::fflush(stdout);
      _exit(rc);
    }
    pids.push_back(pid);
  }

  // Reap; the first failure takes the others down.
  int rc = static_cast<int>(pids.size()) == o.ranks ? 0 : 1;
  size_t live = pids.size();
  while (live > 0) {
    int status = 0;
    pid_t p = waitpid(-1, &status, 0);
    if (p < 0) break;
    --live;
    for (pid_t& q : pids) {
      if (q == p) q = -p;  // reaped: never signal this (possibly reused) pid again
    }
    bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok && rc == 0) {
      rc = 1;
      for (size_t r = 0; r < pids.size(); ++r) {
        if (pids[r] == -p) {
          std::fprintf(stderr, "gloo_allreduce: rank %zu failed (%s %d)\n", r,
                       WIFEXITED(status) ? "exit status" : "signal",
                       WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        }
      }
      for (pid_t q : pids) {
        if (q > 0) kill(q, SIGKILL);
      }
    }
  }
  std::filesystem::remove_all(dir);
  return rc;
}
