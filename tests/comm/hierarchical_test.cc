// The hierarchical allreduce on worlds whose ranks say they are on several hosts
// (CommConfig::host_id): hosts of equal and of different sizes, contiguous and interleaved ranks,
// counts smaller than a host, every dtype and op; every rank ends with the same bits; Auto picks
// it; a rank that does not come is named by its rank in the world.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cohort/comm/algorithms.h"
#include "cohort/comm/communicator.h"
#include "data.h"
#include "world.h"

namespace cohort::comm {
namespace {

using testing::World;

struct Layout {
  std::string name;
  int ranks;
  std::function<int(int)> host_of;  // rank -> host
};

const std::vector<Layout>& layouts() {
  static const std::vector<Layout> all = {
      {"2x2", 4, [](int r) { return r / 2; }},
      {"2x4", 8, [](int r) { return r / 4; }},
      {"3plus1", 4, [](int r) { return r < 3 ? 0 : 1; }},
      {"1plus2plus3", 6, [](int r) { return r == 0  ? 0
                                            : r < 3 ? 1
                                                    : 2; }},
      {"interleaved3of7", 7, [](int r) { return r % 3; }},
      {"oneHost", 3, [](int) { return 0; }},
      {"oneRankEach", 3, [](int r) { return r; }},
  };
  return all;
}

// host_cpus 0: as many CPUs as this process may use. lazy: pairs connect on first use.
World world_of(const Layout& l, size_t chunk_bytes = 256, int host_cpus = 0, bool lazy = false) {
  return World(l.ranks, [&](CommConfig& c) {
    c.host_id = "host" + std::to_string(l.host_of(c.rank));
    c.chunk_bytes = chunk_bytes;
    c.host_cpus = host_cpus;
    if (lazy) c.connect_all_up_to = 1;
  });
}

class Hierarchical : public ::testing::TestWithParam<size_t> {};

TEST_P(Hierarchical, MatchesReferenceOnEveryLayout) {
  for (const Layout& layout : layouts()) {
    World world = world_of(layout);
    const int n = layout.ranks;
    const size_t count = GetParam();
    world.run([&](int r, Communicator& comm) {
      for (DType dt : kWideDTypes) {
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
          auto buf = testing::make_input(dt, r, count);
          comm.allreduce(Buffer{dt, buf.data(), count},
                         {.op = op, .algorithm = Algorithm::Hierarchical})
              ->wait();
          ASSERT_TRUE(testing::matches_reduction(dt, op, n, buf.data(), count))
              << layout.name << " rank " << r;
        }
      }
    });
  }
}

// 0 and 1: fewer elements than ranks on a host; 5: fewer than a host's blocks on some hosts.
INSTANTIATE_TEST_SUITE_P(Counts, Hierarchical,
                         ::testing::Values(size_t{0}, size_t{1}, size_t{5}, size_t{1000},
                                           size_t{65539}),
                         [](const auto& info) { return "count" + std::to_string(info.param); });

TEST(HierarchicalAllreduce, EveryRankEndsWithTheSameBits) {
  // Random floats, whose sums depend on the order of the additions: the ranks must still agree.
  for (const Layout& layout : layouts()) {
    World world = world_of(layout, 4096);
    const size_t count = 100003;
    std::vector<std::vector<float>> results(static_cast<size_t>(layout.ranks));
    world.run([&](int r, Communicator& comm) {
      std::mt19937 gen(static_cast<unsigned>(r) + 1);
      std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
      std::vector<float>& v = results[static_cast<size_t>(r)];
      v.resize(count);
      for (float& x : v) x = dist(gen);
      comm.allreduce(Buffer{DType::F32, v.data(), count},
                     {.op = ReduceOp::Avg, .algorithm = Algorithm::Hierarchical})
          ->wait();
    });
    for (int r = 1; r < layout.ranks; ++r) {
      EXPECT_EQ(std::memcmp(results[0].data(), results[static_cast<size_t>(r)].data(),
                            count * sizeof(float)),
                0)
          << layout.name << ": rank " << r << " differs from rank 0";
    }
  }
}

// A small allreduce is recursive doubling's, except on one host with more ranks than CPUs, where
// it is the linear allreduce's (allreduce_auto.cc): each host states 64 CPUs, then 1; in a full
// mesh and in one whose pairs connect on first use (each agrees on it differently, mesh_lazy.h).
TEST(HierarchicalAllreduce, AutoPicksItAcrossHostsOfSeveralRanksOnly) {
  for (const auto& [cpus, connect_lazily] : {std::pair{64, false}, {1, false}, {1, true}}) {
    const int host_cpus = cpus;  // copies: clang 14 lambdas cannot capture a structured binding
    const bool lazy = connect_lazily;
    for (const Layout& layout : layouts()) {
      World world = world_of(layout, 64 << 10, host_cpus, lazy);
      const bool expect = layout.name != "oneHost" && layout.name != "oneRankEach";
      const Algorithm small = host_cpus == 1 && layout.name == "oneHost"
                                  ? Algorithm::Linear
                                  : Algorithm::RecursiveDoubling;
      world.run([&](int r, Communicator& comm) {
        std::vector<float> big(1 << 18, 1.0f), tiny(16, 1.0f);
        comm.allreduce(Buffer{DType::F32, big.data(), big.size()})->wait();
        comm.allreduce(Buffer{DType::F32, tiny.data(), tiny.size()})->wait();
        const FlightSnapshot s = comm.flight_recorder().snapshot();
        ASSERT_EQ(s.records.size(), 2u);
        EXPECT_EQ(s.records[0].algorithm == Algorithm::Hierarchical, expect)
            << layout.name << " rank " << r << ": " << algorithm_name(s.records[0].algorithm);
        EXPECT_EQ(s.records[1].algorithm, small)
            << layout.name << ", " << host_cpus << " CPUs" << (lazy ? ", lazy: " : ": ")
            << algorithm_name(s.records[1].algorithm);
        EXPECT_EQ(big[12345], static_cast<float>(layout.ranks));
        EXPECT_EQ(tiny[15], static_cast<float>(layout.ranks));
      });
    }
  }
}

// From 1 MiB on one host over shared memory Auto takes the ring, unless each CPU holds more than
// kSharedMemoryRingMaxRanksPerCpu ranks: 33 ranks stating 2 CPUs (17 per CPU), then 1 (33); the
// ranks agree on it in a full mesh and in one whose pairs connect on first use.
TEST(HierarchicalAllreduce, AutoKeepsHalvingDoublingForLargeMessagesOnAVeryCrowdedHost) {
  static_assert(33 > kSharedMemoryRingMaxRanksPerCpu && 17 <= kSharedMemoryRingMaxRanksPerCpu);
  const Layout one_host{"oneHost", 33, [](int) { return 0; }};
  for (const auto& [cpus, connect_lazily] : {std::pair{2, false}, {1, false}, {1, true}}) {
    const int host_cpus = cpus;  // copies: clang 14 lambdas cannot capture a structured binding
    const bool lazy = connect_lazily;
    World world = world_of(one_host, 64 << 10, host_cpus, lazy);
    const Algorithm expect = host_cpus == 1 ? Algorithm::HalvingDoubling : Algorithm::Ring;
    world.run([&](int r, Communicator& comm) {
      std::vector<float> big(kSharedMemoryRingMinBytes / sizeof(float), 1.0f);
      comm.allreduce(Buffer{DType::F32, big.data(), big.size()})->wait();
      const FlightSnapshot s = comm.flight_recorder().snapshot();
      ASSERT_EQ(s.records.size(), 1u);
      EXPECT_EQ(s.records[0].algorithm, expect)
          << "rank " << r << ", " << host_cpus << " CPUs" << (lazy ? ", lazy: " : ": ")
          << algorithm_name(s.records[0].algorithm);
      EXPECT_EQ(big[12345], 33.0f);
    });
  }
}

TEST(HierarchicalAllreduce, PairsWithinAHostAreSharedMemoryAndAcrossHostsTcp) {
  World world = world_of(layouts()[1]);  // 2 hosts x 4 ranks
  for (int r = 0; r < world.size(); ++r) {
    EXPECT_EQ(world[r].stats().shm_pairs, 3) << "rank " << r;
    EXPECT_EQ(world[r].stats().tcp_pairs, 4) << "rank " << r;
  }
}

TEST(HierarchicalAllreduce, ARankThatNeverComesIsNamedByItsRankInTheWorld) {
  // 2 hosts x 2 ranks; rank 3 does not call the collective. Its host-mate waits for it within the
  // host, rank 1 across hosts: both name rank 3, not a number of the group they ran in.
  const Layout& layout = layouts()[0];
  World world(layout.ranks, [&](CommConfig& c) {
    c.host_id = "host" + std::to_string(layout.host_of(c.rank));
    c.timeout = std::chrono::milliseconds(1500);
  });
  world.run([&](int r, Communicator& comm) {
    if (r == 3) return;
    std::vector<float> v(1 << 16, 1.0f);
    try {
      comm.allreduce(Buffer{DType::F32, v.data(), v.size()}, {.algorithm = Algorithm::Hierarchical})
          ->wait();
      ADD_FAILURE() << "rank " << r << " finished without rank 3";
    } catch (const CollectiveTimeoutError& e) {
      EXPECT_EQ(e.missing_ranks(), std::vector<int>{3}) << "rank " << r << ": " << e.what();
      EXPECT_EQ(e.sequence(), 1u);
    } catch (const PeerLostError& e) {
      // A rank whose neighbour gave up first sees it close its connections after blaming rank 3.
      EXPECT_EQ(e.rank(), 3) << "rank " << r << ": " << e.what();
    }
  });
}

TEST(HostId, ThatIsNotOneWordIsRefused) {
  store::MemoryStore store;
  CommConfig c = testing::test_config(0, 1);
  c.host_id = "two words";
  EXPECT_THROW(Communicator::create(store, c), ConfigError);
  c.host_id = std::string(129, 'h');
  EXPECT_THROW(Communicator::create(store, c), ConfigError);
}

}  // namespace
}  // namespace cohort::comm
