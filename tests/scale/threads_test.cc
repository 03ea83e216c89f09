// Communicators of 1,024 ranks: threads of this process, each its own rank over real loopback
// sockets, in a world too large for a full mesh (each pair connects on first use). Checked against
// the reference sum, with how many connections a rank holds and how much heap the communicators
// take per rank (thread stacks are not heap: pthreads maps them itself).
#include <gtest/gtest.h>
#include <malloc.h>

#include <chrono>
#include <cstdio>
#include <vector>

#include "../comm/world.h"
#include "cohort/comm/communicator.h"

namespace cohort::comm {
namespace {

using testing::World;

size_t heap_in_use() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

void allreduce_world(int n, size_t count) {
  const size_t heap_before = heap_in_use();
  const auto started = std::chrono::steady_clock::now();
  World world(n, testing::Wires::Tcp, [](CommConfig& c) {
    c.timeout = std::chrono::seconds(120);
    c.flight_recorder_entries = 16;
  });
  const auto formed = std::chrono::steady_clock::now();
  world.run([&](int r, Communicator& comm) {
    std::vector<int64_t> v(count);
    for (size_t i = 0; i < count; ++i) v[i] = r + static_cast<int64_t>(i);
    comm.allreduce(Buffer{DType::I64, v.data(), count})->wait();
    const int64_t ranks = n;
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(v[i], ranks * (ranks - 1) / 2 + ranks * static_cast<int64_t>(i)) << "rank " << r;
    }
    // A rank holds connections to the peers its algorithm needed only.
    const CommStats s = comm.stats();
    EXPECT_LE(s.tcp_pairs + s.shm_pairs, 16) << "rank " << r;
    EXPECT_GE(s.tcp_pairs + s.shm_pairs, 1) << "rank " << r;
  });
  const auto done = std::chrono::steady_clock::now();
  const size_t per_rank = (heap_in_use() - std::min(heap_in_use(), heap_before)) / n;
  std::printf("%d ranks: formed in %.2f s, allreduce of %zu in %.2f s; heap %.2f MB per rank\n", n,
              std::chrono::duration<double>(formed - started).count(), count,
              std::chrono::duration<double>(done - formed).count(), per_rank / 1e6);
  EXPECT_LT(per_rank, size_t{8} << 20);
}

TEST(Scale, A1024RankWorldOfThreadsAllreduces) {
  allreduce_world(1024, 5);
}

TEST(Scale, A1000RankWorldFoldsItsExtraRanks) {
  // Not a power of two: recursive doubling folds 1000 - 512 ranks in and out first.
  allreduce_world(1000, 3);
}

}  // namespace
}  // namespace cohort::comm
