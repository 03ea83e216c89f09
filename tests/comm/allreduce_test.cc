// Allreduce over world sizes x element counts x algorithms; inside each, every dtype and op
// (the largest count only for f32 and i32 sums, to keep the suite fast).
#include <gtest/gtest.h>

#include <tuple>

#include "cohort/comm/algorithms.h"
#include "cohort/comm/communicator.h"
#include "data.h"
#include "world.h"

namespace cohort::comm {
namespace {

using testing::Wires;
using testing::World;

constexpr size_t kBig = (size_t{1} << 20) + 3;

class Allreduce : public ::testing::TestWithParam<std::tuple<int, size_t, Algorithm, Wires>> {};

TEST_P(Allreduce, MatchesReference) {
  const int n = std::get<0>(GetParam());
  const size_t count = std::get<1>(GetParam());
  const Algorithm algo = std::get<2>(GetParam());
  const Wires wires = std::get<3>(GetParam());
  // Tiny segments force the multi-segment pipeline; the big count uses larger ones so the test
  // stays fast (it is still thousands of segments).
  World world(n, wires, [&](CommConfig& c) { c.chunk_bytes = count >= kBig ? 64 << 10 : 256; });

  std::vector<std::pair<DType, ReduceOp>> cases;
  if (count >= kBig) {
    cases = {{DType::F32, ReduceOp::Sum}, {DType::I32, ReduceOp::Sum}};
  } else {
    for (DType dt : kWideDTypes) {
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
        cases.emplace_back(dt, op);
      }
    }
  }
  world.run([&](int r, Communicator& comm) {
    // Issue every case at once: they queue up and run in order, exercising the queue too.
    std::vector<std::vector<uint8_t>> bufs;
    std::vector<std::shared_ptr<Work>> works;
    for (auto [dt, op] : cases) bufs.push_back(testing::make_input(dt, r, count));
    for (size_t c = 0; c < cases.size(); ++c) {
      works.push_back(comm.allreduce(Buffer{cases[c].first, bufs[c].data(), count},
                                     {.op = cases[c].second, .algorithm = algo}));
    }
    for (size_t c = 0; c < cases.size(); ++c) {
      works[c]->wait();
      EXPECT_EQ(works[c]->sequence(), c + 1);
      EXPECT_TRUE(
          testing::matches_reduction(cases[c].first, cases[c].second, n, bufs[c].data(), count))
          << "rank " << r;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(
    WorldsCountsAlgorithmsTransports, Allreduce,
    ::testing::Combine(::testing::Values(1, 2, 3, 4, 5, 8),
                       ::testing::Values(size_t{0}, size_t{1}, size_t{7}, size_t{1000}, kBig),
                       ::testing::Values(Algorithm::Ring, Algorithm::HalvingDoubling,
                                         Algorithm::RecursiveDoubling, Algorithm::Hierarchical,
                                         Algorithm::Linear, Algorithm::Auto),
                       ::testing::Values(Wires::Tcp, Wires::Shm, Wires::Mixed, Wires::Hosts,
                                         Wires::Lazy, Wires::Hmac, Wires::Gmac)),
    [](const auto& info) {
      return "n" + std::to_string(std::get<0>(info.param)) + "_count" +
             std::to_string(std::get<1>(info.param)) + "_" +
             std::string(algorithm_name(std::get<2>(info.param))) + "_" +
             testing::wires_name(std::get<3>(info.param));
    });

TEST(RingOrder, VisitsEveryStepOfEverySegmentOnceAndForwardsOnlyWhatArrived) {
  for (size_t steps : {1u, 2u, 6u}) {
    for (size_t segments : {1u, 4u, 7u, 12u}) {
      for (size_t window : {0u, 1u, 2u, 3u, 5u, 12u, 20u}) {
        const RingOrder order(steps, segments, window);
        const std::string where = "steps " + std::to_string(steps) + ", segments " +
                                  std::to_string(segments) + ", window " + std::to_string(window);
        std::vector<std::vector<size_t>> index(steps, std::vector<size_t>(segments, SIZE_MAX));
        for (size_t i = 0; i < order.count(); ++i) {
          size_t s, k;
          order.at(i, &s, &k);
          ASSERT_LT(s, steps) << where;
          ASSERT_LT(k, segments) << where;
          ASSERT_EQ(index[s][k], SIZE_MAX) << where << ": item " << i << " visits a pair twice";
          index[s][k] = i;
        }
        for (size_t s = 0; s < steps; ++s) {
          for (size_t k = 0; k < segments; ++k) {
            const size_t i = index[s][k];
            if (s == 0) {
              EXPECT_EQ(order.needs(i), 0u) << where;
              continue;
            }
            // Exactly the items up to and including step s - 1 of the same segment.
            EXPECT_EQ(order.needs(i), index[s - 1][k] + 1)
                << where << ", step " << s << ", segment " << k;
            if (window == 0 || window >= segments) {
              EXPECT_EQ(i, s * segments + k) << where << ": not the plain step-by-step order";
            } else {
              EXPECT_LE(i - index[s - 1][k], window) << where << ": forwarded late";
            }
          }
        }
      }
    }
  }
}

class RingWindow : public ::testing::TestWithParam<std::tuple<int, size_t>> {};

TEST_P(RingWindow, MatchesReference) {
  const int n = std::get<0>(GetParam());
  const size_t window = std::get<1>(GetParam());
  // 64-element segments: blocks of 5003 / n elements span 16..40 segments, so rounds of every
  // window run, the last one short.
  World world(n, [&, w = window](CommConfig& c) {
    c.chunk_bytes = 256;
    c.ring_window = w;
  });
  const size_t count = 5003;
  world.run([&](int r, Communicator& comm) {
    for (auto [dt, op] :
         {std::pair{DType::F32, ReduceOp::Sum}, std::pair{DType::I64, ReduceOp::Max},
          std::pair{DType::F64, ReduceOp::Avg}}) {
      auto buf = testing::make_input(dt, r, count);
      comm.allreduce(Buffer{dt, buf.data(), count}, {.op = op, .algorithm = Algorithm::Ring})
          ->wait();
      EXPECT_TRUE(testing::matches_reduction(dt, op, n, buf.data(), count)) << "rank " << r;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(WorldsWindows, RingWindow,
                         ::testing::Combine(::testing::Values(2, 3, 4, 5),
                                            ::testing::Values(size_t{0}, size_t{1}, size_t{2},
                                                              size_t{3}, size_t{7})),
                         [](const auto& info) {
                           return "n" + std::to_string(std::get<0>(info.param)) + "_window" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(AllreduceStats, RingMovesTwiceTheBufferTimesNMinusOneOverN) {
  const int n = 4;
  const size_t count = 4000;
  World world(n);
  world.run([&](int r, Communicator& comm) {
    auto buf = testing::make_input(DType::F32, r, count);
    comm.allreduce(Buffer{DType::F32, buf.data(), count}, {.algorithm = Algorithm::Ring})->wait();
    CommStats s = comm.stats();
    const uint64_t payload = 2 * (n - 1) * (count / n) * 4;
    EXPECT_GE(s.bytes_sent, payload);
    EXPECT_LE(s.bytes_sent, payload + payload / 4);  // headers are a small overhead
    EXPECT_GE(s.bytes_received, payload);
    EXPECT_EQ(s.collectives, 1u);
  });
}

TEST(AllreduceAuto, PicksRecursiveDoublingForTinyHalvingDoublingForSmallAndRingForLarge) {
  // Only the shape of the rule is fixed here; the thresholds are tuned by measurement.
  EXPECT_EQ(choose_allreduce(1 << 10, {.size = 2}), Algorithm::RecursiveDoubling);
  EXPECT_EQ(choose_allreduce(1 << 10, {.size = 8}), Algorithm::RecursiveDoubling);
  EXPECT_EQ(choose_allreduce(kRecursiveDoublingMaxBytes + 4, {.size = 8}),
            Algorithm::HalvingDoubling);
  EXPECT_EQ(choose_allreduce(64 << 20, {.size = 8}), Algorithm::Ring);
  EXPECT_EQ(choose_allreduce(64 << 20, {.size = 3}), Algorithm::Ring);
}

TEST(AllreduceAuto, PicksLinearForSmallMessagesOnlyOnOneHostWithMoreRanksThanCpus) {
  const WorldShape crowded{.size = 8, .max_local = 8, .shared_memory = true, .ranks_per_cpu = 4};
  EXPECT_EQ(choose_allreduce(1 << 10, crowded), Algorithm::Linear);
  EXPECT_EQ(choose_allreduce(kRecursiveDoublingMaxBytes, crowded), Algorithm::Linear);
  EXPECT_EQ(choose_allreduce(kRecursiveDoublingMaxBytes + 4, crowded), Algorithm::HalvingDoubling);
  // A CPU for every rank, TCP between the ranks, several hosts, or two ranks: recursive doubling.
  EXPECT_EQ(choose_allreduce(1 << 10, {.size = 8, .max_local = 8, .shared_memory = true}),
            Algorithm::RecursiveDoubling);
  EXPECT_EQ(choose_allreduce(1 << 10, {.size = 8, .max_local = 8, .ranks_per_cpu = 4}),
            Algorithm::RecursiveDoubling);
  EXPECT_EQ(choose_allreduce(
                1 << 10,
                {.size = 8, .hosts = 2, .max_local = 4, .shared_memory = true, .ranks_per_cpu = 4}),
            Algorithm::RecursiveDoubling);
  EXPECT_EQ(choose_allreduce(
                1 << 10, {.size = 2, .max_local = 2, .shared_memory = true, .ranks_per_cpu = 4}),
            Algorithm::RecursiveDoubling);
}

TEST(AllreduceAuto, KeepsHalvingDoublingForLargeMessagesOnlyOnAVeryCrowdedHost) {
  // One host over shared memory: the ring from kSharedMemoryRingMinBytes, unless each CPU holds
  // more than kSharedMemoryRingMaxRanksPerCpu ranks; over TCP the rule does not weigh crowding.
  const auto shm = [](int per_cpu) {
    return WorldShape{.size = 64, .max_local = 64, .shared_memory = true, .ranks_per_cpu = per_cpu};
  };
  EXPECT_EQ(choose_allreduce(kSharedMemoryRingMinBytes - 4, shm(1)), Algorithm::HalvingDoubling);
  EXPECT_EQ(choose_allreduce(kSharedMemoryRingMinBytes, shm(1)), Algorithm::Ring);
  EXPECT_EQ(choose_allreduce(kSharedMemoryRingMinBytes, shm(kSharedMemoryRingMaxRanksPerCpu)),
            Algorithm::Ring);
  EXPECT_EQ(choose_allreduce(kSharedMemoryRingMinBytes, shm(kSharedMemoryRingMaxRanksPerCpu + 1)),
            Algorithm::HalvingDoubling);
  EXPECT_EQ(choose_allreduce(size_t{1} << 30, shm(kSharedMemoryRingMaxRanksPerCpu + 1)),
            Algorithm::HalvingDoubling);
  const WorldShape tcp{.size = 64, .max_local = 64, .ranks_per_cpu = 32};
  EXPECT_EQ(choose_allreduce(size_t{1} << 30, tcp), Algorithm::Ring);
}

TEST(AllreduceAuto, PicksHierarchicalAboveRecursiveDoublingWhenHostsHoldSeveralRanks) {
  const WorldShape two_by_four{.size = 8, .hosts = 2, .max_local = 4, .shared_memory = true};
  EXPECT_EQ(choose_allreduce(64 << 20, two_by_four), Algorithm::Hierarchical);
  EXPECT_EQ(
      choose_allreduce(kRecursiveDoublingMaxBytes + 4, {.size = 4, .hosts = 2, .max_local = 2}),
      Algorithm::Hierarchical);
  EXPECT_EQ(choose_allreduce(1 << 10, two_by_four), Algorithm::RecursiveDoubling);
  // One rank per host, or one host: nothing to gain over the flat algorithms.
  EXPECT_EQ(choose_allreduce(64 << 20, {.size = 8, .hosts = 8}), Algorithm::Ring);
  EXPECT_EQ(choose_allreduce(64 << 20, {.size = 8, .max_local = 8}), Algorithm::Ring);
}

TEST(AllreduceAuto, OverSharedMemoryTheRingTakesOverAtAFixedSizeNotOneGrowingWithRanks) {
  // Over TCP the crossover grows with n(n - 1); over shared memory it does not.
  for (int n : {4, 16, 32, 64}) {
    const WorldShape shm{.size = n, .max_local = n, .shared_memory = true};
    EXPECT_EQ(choose_allreduce(kSharedMemoryRingMinBytes - 4, shm), Algorithm::HalvingDoubling)
        << n;
    EXPECT_EQ(choose_allreduce(kSharedMemoryRingMinBytes, shm), Algorithm::Ring) << n;
  }
  EXPECT_EQ(choose_allreduce(kSharedMemoryRingMinBytes, {.size = 32, .max_local = 32}),
            Algorithm::HalvingDoubling);
  // Across hosts the hosts' links decide, whatever carries the pairs within one.
  EXPECT_EQ(
      choose_allreduce(kSharedMemoryRingMinBytes, {.size = 32, .hosts = 32, .shared_memory = true}),
      Algorithm::HalvingDoubling);
}

// What the communicator resolves Auto to is what its flight record shows: on one host it weighs
// whether every rank put its pairs on shared memory, alike on every rank (a world of mixed settings
// resolves as TCP, so its ranks still agree).
TEST(AllreduceAuto, CommunicatorWeighsSharedMemoryAlikeOnEveryRank) {
  constexpr int kRanks = 16;
  const size_t count = kSharedMemoryRingMinBytes / sizeof(float);
  struct Case {
    Wires wires;
    bool lazy;  // pairs connected on first use: the flag travels with the rendezvous, not the pairs
    Algorithm expected;
  };
  for (const Case& c :
       {Case{Wires::Shm, false, Algorithm::Ring}, Case{Wires::Shm, true, Algorithm::Ring},
        Case{Wires::Tcp, false, Algorithm::HalvingDoubling},
        Case{Wires::Mixed, false, Algorithm::HalvingDoubling},
        Case{Wires::Mixed, true, Algorithm::HalvingDoubling}}) {
    World world(kRanks, c.wires, [&](CommConfig& config) {
      if (c.lazy) config.connect_all_up_to = 1;
    });
    world.run([&](int r, Communicator& comm) {
      std::vector<uint8_t> buf = testing::make_input(DType::F32, r, count);
      comm.allreduce(Buffer{DType::F32, buf.data(), count}, {})->wait();
      EXPECT_TRUE(testing::matches_reduction(DType::F32, ReduceOp::Sum, kRanks, buf.data(), count))
          << "rank " << r;
      const FlightSnapshot s = comm.flight_recorder().snapshot();
      ASSERT_EQ(s.records.size(), 1u);
      EXPECT_EQ(s.records[0].algorithm, c.expected)
          << testing::wires_name(c.wires) << (c.lazy ? " on first use" : "") << ", rank " << r;
    });
  }
}

}  // namespace
}  // namespace cohort::comm
