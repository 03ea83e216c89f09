// This machine's memcpy bandwidth per message size, the ceiling for a shared-memory transport
// (which copies every byte into its ring and out again): BENCHMARKS.md states Cohort's and Open
// MPI's shared-memory busbw as a fraction of it.
//
//   memcpy_bandwidth --sizes 4K,1M,16M,64M
//
// For each size, one source and one destination buffer of that size (touched first, so no page
// faults are timed); memcpy repeated for about 0.3 s; the median time of one copy. Prints one JSON
// line per size: {"bytes": B, "time_us": T, "copy_gbps": B / T} (GB/s = 1e9 B/s).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cohort/cli/bench_method.h"

int main(int argc, char** argv) {
  std::string sizes_arg = "4K,64K,1M,16M,64M";
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--sizes") sizes_arg = argv[++i];
  }
  for (uint64_t bytes : cohort::bench::parse_sizes(sizes_arg, 1)) {
    std::vector<char> src(bytes, 1), dst(bytes, 2);
    std::vector<double> times;
    const auto start = std::chrono::steady_clock::now();
    while (times.size() < 10 ||
           (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(300) &&
            times.size() < 100000)) {
      const auto t0 = std::chrono::steady_clock::now();
      std::memcpy(dst.data(), src.data(), bytes);
      asm volatile("" : : "r"(dst.data()) : "memory");  // the copy is not optimised away
      times.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
    const double t = times[times.size() / 2];
    std::printf("{\"bytes\":%llu,\"time_us\":%.3f,\"copy_gbps\":%.4f}\n",
                static_cast<unsigned long long>(bytes), t, bytes / (t * 1e-6) / 1e9);
  }
  return 0;
}
