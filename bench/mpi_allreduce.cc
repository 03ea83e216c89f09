// MPI_Allreduce (float32, sum, in place) measured with Cohort's method (cohort/cli/bench_method.h).
//
//   mpirun --allow-run-as-root --oversubscribe -np N --mca pml ob1 --mca btl tcp,self
//       mpi_allreduce --sizes 4K,1M,64M --transport tcp [--algorithm LABEL]
//                     [--iters K] [--warmup W]
//
// The algorithm is whatever the MPI library selects for the size and rank count (Open MPI's
// "tuned" collective component), reported as "default", unless mpirun's --mca settings choose one
// (coll_tuned_use_dynamic_rules 1, coll_tuned_allreduce_algorithm K): --algorithm then names it in
// the output. --transport only labels the output too: the byte transfer layer is chosen by
// mpirun's --mca btl. Rank 0 prints one JSON line per size in the same shape as
// `cohort bench allreduce --json`.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "cohort/cli/bench_method.h"
#include "cpus_of_this_process.h"

namespace {

double g_setup_ms = -1;  // MPI_Init's time on the slowest rank

namespace cb = cohort::bench;

int run(int argc, char** argv, int rank, int size) {
  std::vector<uint64_t> sizes = cb::parse_sizes("4K,64K,1M,16M,64M", sizeof(float));
  std::string transport = "tcp";
  std::string algorithm = "default";
  cb::MethodOptions method;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--sizes")
      sizes = cb::parse_sizes(value(), sizeof(float));
    else if (a == "--transport")
      transport = value();
    else if (a == "--algorithm")
      algorithm = value();
    else if (a == "--iters")
      method.iters = std::stoi(value());
    else if (a == "--warmup")
      method.warmup = std::stoi(value());
    else
      throw std::invalid_argument("unknown option " + a);
  }

  for (uint64_t bytes : sizes) {
    const int count = static_cast<int>(bytes / sizeof(float));
    std::vector<float> buf(count);
    // Correctness once per size: rank r contributes r+1+(i%7); the sum is known exactly.
    for (int i = 0; i < count; ++i) buf[i] = static_cast<float>(rank + 1 + i % 7);
    MPI_Allreduce(MPI_IN_PLACE, buf.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < count; ++i) {
      float want = static_cast<float>(size * (size + 1) / 2 + size * (i % 7));
      if (buf[i] != want) {
        std::fprintf(stderr, "mpi rank %d: wrong result at %d for %llu bytes: %g != %g\n", rank, i,
                     static_cast<unsigned long long>(bytes), buf[i], want);
        return 1;
      }
    }
    // Timed iterations reduce zeros, so values never overflow.
    std::fill(buf.begin(), buf.end(), 0.0f);
    auto m = cb::measure(
        method,
        [&] { MPI_Allreduce(MPI_IN_PLACE, buf.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); },
        [&](std::vector<double>& v) {
          MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_DOUBLE, MPI_MAX,
                        MPI_COMM_WORLD);
        });
    if (rank == 0) {
      cb::Result r{.algorithm = algorithm,
                   .library = "openmpi",
                   .transport = transport,
                   .ranks = size,
                   .bytes = bytes,
                   .time_us = m.time_us,
                   .mean_us = m.mean_us,
                   .iters = m.iters,
                   .setup_ms = g_setup_ms,
                   .cpus_per_rank = cpus_of_this_process()};
      std::printf("%s\n", cb::to_json(r).c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const auto started = std::chrono::steady_clock::now();
  MPI_Init(&argc, &argv);
  // The slowest rank's setup: MPI_Init, which wires the ranks up.
  g_setup_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  MPI_Allreduce(MPI_IN_PLACE, &g_setup_ms, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int rc = 1;
  try {
    rc = run(argc, argv, rank, size);
  } catch (const std::exception& e) {
    std::cerr << "mpi_allreduce rank " << rank << ": " << e.what() << "\n";
    rc = 2;
  }
  if (rc != 0) MPI_Abort(MPI_COMM_WORLD, rc);
  MPI_Finalize();
  return 0;
}
