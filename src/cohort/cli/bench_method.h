// The allreduce measurement method, shared by `cohort bench` and the peer harnesses in bench/
// (Gloo, OpenMPI) so that every library is timed the same way. Header-only and standard C++ only,
// so that a harness can include it without linking Cohort.
//
// Method, per message size:
//   1. `warmup` untimed-for-the-result iterations; their mean time, maximised across ranks, is the
//      estimate of one iteration (the same number on every rank, so every rank picks the same
//      iteration count and nobody waits for a collective that its peers never issue).
//   2. `iters` timed iterations, back to back, no barrier in between. Unless fixed by the caller,
//      iters = clamp(ceil(target_seconds / estimate), min_iters, max_iters).
//   3. Each rank times every iteration on its own (issue to completion, steady clock). The time of
//      iteration i is the maximum across ranks (an allreduce-max of the per-iteration vector,
//      done by the library under test after the timed loop). The reported time is the median over
//      iterations, which ignores a few iterations disturbed by the scheduler.
//   4. Beside it, nccl-tests' figure: each rank also times the whole loop, and the mean time is
//      the slowest rank's loop time divided by `iters` (every disturbance counts, and iterations
//      may overlap their neighbours' tails, as nccl-tests' back-to-back loop lets them).
//   algbw = bytes / time, busbw = algbw * 2(n-1)/n (nccl-tests' definitions; GB/s = 1e9 B/s).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace cohort::bench {

struct MethodOptions {
  int warmup = 5;
  int iters = 0;  // 0: chosen from the warm-up estimate
  double target_seconds = 0.5;
  int min_iters = 10;
  int max_iters = 10000;
};

struct Measurement {
  double time_us = 0;  // median over iterations of the max across ranks
  double mean_us = 0;  // the slowest rank's timed loop / iters (nccl-tests)
  int iters = 0;
};

// One line of output, identical in shape for every library.
struct Result {
  std::string algorithm;
  std::string library;
  std::string transport;
  int ranks = 0;
  uint64_t bytes = 0;
  double time_us = 0;
  double mean_us = 0;  // 0: not measured
  int iters = 0;
  // Cohort's data-plane integrity (CommConfig::integrity), when not "none".
  std::string integrity;
  // Communicator setup, the slowest rank's: from its start (store or launcher connection
  // included) until it could run a collective. Negative: not measured.
  double setup_ms = -1;
  // How many CPUs rank 0 could run on (its affinity mask: 1 where each rank was bound to a CPU of
  // its own, as mpirun binds). 0: not reported.
  int cpus_per_rank = 0;

  double algbw_gbps() const { return time_us > 0 ? bytes / (time_us * 1e-6) / 1e9 : 0; }
  double busbw_gbps() const { return ranks > 0 ? algbw_gbps() * 2.0 * (ranks - 1) / ranks : 0; }
};

inline std::string to_json(const Result& r) {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "{\"collective\":\"allreduce\",\"algorithm\":\"%s\",\"library\":\"%s\","
                "\"transport\":\"%s\",\"ranks\":%d,\"bytes\":%llu,\"time_us\":%.3f,"
                "\"algbw_gbps\":%.4f,\"busbw_gbps\":%.4f,\"iters\":%d}",
                r.algorithm.c_str(), r.library.c_str(), r.transport.c_str(), r.ranks,
                static_cast<unsigned long long>(r.bytes), r.time_us, r.algbw_gbps(), r.busbw_gbps(),
                r.iters);
  std::string out = buf;
  if (!r.integrity.empty()) {
    out.pop_back();
    out += ",\"integrity\":\"" + r.integrity + "\"}";
  }
  if (r.mean_us > 0) {
    std::snprintf(buf, sizeof(buf), ",\"mean_us\":%.3f}", r.mean_us);
    out.pop_back();
    out += buf;
  }
  if (r.setup_ms >= 0) {
    std::snprintf(buf, sizeof(buf), ",\"setup_ms\":%.3f}", r.setup_ms);
    out.pop_back();
    out += buf;
  }
  if (r.cpus_per_rank > 0) {
    std::snprintf(buf, sizeof(buf), ",\"cpus_per_rank\":%d}", r.cpus_per_rank);
    out.pop_back();
    out += buf;
  }
  return out;
}

// "4K" -> 4096, "64M", "1G", "512" (binary suffixes, case-insensitive, optional trailing B/iB).
inline uint64_t parse_size(std::string_view s) {
  std::string t(s);
  auto fail = [&] {
    throw std::invalid_argument("invalid size '" + std::string(s) +
                                "' (expected a number with an optional K, M or G suffix)");
  };
  if (t.empty()) fail();
  if (t.size() > 2 && (t.ends_with("iB") || t.ends_with("ib")))
    t.resize(t.size() - 2);
  else if (t.size() > 1 && (t.back() == 'B' || t.back() == 'b'))
    t.pop_back();
  uint64_t mult = 1;
  switch (t.empty() ? '\0' : t.back()) {
    case 'k':
    case 'K':
      mult = 1ull << 10;
      t.pop_back();
      break;
    case 'm':
    case 'M':
      mult = 1ull << 20;
      t.pop_back();
      break;
    case 'g':
    case 'G':
      mult = 1ull << 30;
      t.pop_back();
      break;
    default:
      break;
  }
  if (t.empty() || t.find_first_not_of("0123456789") != std::string::npos || t.size() > 12) fail();
  return std::stoull(t) * mult;
}

// Comma-separated sizes; each a positive multiple of elem_size.
inline std::vector<uint64_t> parse_sizes(std::string_view list, size_t elem_size) {
  std::vector<uint64_t> out;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    if (comma == std::string_view::npos) comma = list.size();
    uint64_t b = parse_size(list.substr(pos, comma - pos));
    if (b == 0 || b % elem_size != 0) {
      throw std::invalid_argument("size " + std::to_string(b) + " is not a positive multiple of " +
                                  std::to_string(elem_size) + " bytes");
    }
    out.push_back(b);
    pos = comma + 1;
  }
  return out;
}

// "4 KiB", "64 MiB", "1000 B".
inline std::string human_bytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (u < 3 && b >= 1024 && b % 1024 == 0) {
    b /= 1024;
    ++u;
  }
  return std::to_string(b) + " " + units[u];
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

inline int choose_iters(const MethodOptions& o, double estimate_s) {
  if (o.iters > 0) return o.iters;
  double n = estimate_s > 0 ? std::ceil(o.target_seconds / estimate_s) : o.max_iters;
  return static_cast<int>(std::clamp<double>(n, o.min_iters, o.max_iters));
}

// Runs the method above. `op()` runs one collective to completion on this rank;
// `max_across_ranks(std::vector<double>&)` replaces the vector, element-wise, by its maximum over
// all ranks (every rank calls it with a vector of the same length).
template <class Op, class MaxAcrossRanks>
Measurement measure(const MethodOptions& o, Op&& op, MaxAcrossRanks&& max_across_ranks) {
  using Clock = std::chrono::steady_clock;
  auto seconds_since = [](Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  int warmup = std::max(o.warmup, o.iters > 0 ? 0 : 1);
  auto w0 = Clock::now();
  for (int i = 0; i < warmup; ++i) op();
  std::vector<double> estimate{warmup > 0 ? seconds_since(w0) / warmup : 0.0};
  if (o.iters <= 0) max_across_ranks(estimate);
  const int iters = choose_iters(o, estimate[0]);

  // The iterations' times, then the whole loop's (one allreduce-max covers both).
  std::vector<double> t(iters + 1);
  const auto loop0 = Clock::now();
  for (int i = 0; i < iters; ++i) {
    auto t0 = Clock::now();
    op();
    t[i] = seconds_since(t0);
  }
  t[iters] = seconds_since(loop0);
  max_across_ranks(t);
  const double loop = t[iters];
  t.pop_back();
  return {.time_us = median(t) * 1e6, .mean_us = loop / iters * 1e6, .iters = iters};
}

}  // namespace cohort::bench
