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

using testing::World;

constexpr size_t kBig = (size_t{1} << 20) + 3;

class Allreduce : public ::testing::TestWithParam<std::tuple<int, size_t, Algorithm>> {};

TEST_P(Allreduce, MatchesReference) {
  const auto [n, count, algo] = GetParam();
  // Tiny segments force the multi-segment pipeline; the big count uses larger ones so the test
  // stays fast (it is still thousands of segments).
  World world(n, [&](CommConfig& c) { c.chunk_bytes = count >= kBig ? 64 << 10 : 256; });

  std::vector<std::pair<DType, ReduceOp>> cases;
  if (count >= kBig) {
    cases = {{DType::F32, ReduceOp::Sum}, {DType::I32, ReduceOp::Sum}};
  } else {
    for (DType dt : kAllDTypes) {
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
      EXPECT_TRUE(testing::matches_reduction(cases[c].first, cases[c].second, n, bufs[c].data(),
                                             count))
          << "rank " << r;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(
    WorldsCountsAlgorithms, Allreduce,
    ::testing::Combine(::testing::Values(1, 2, 3, 4, 5, 8),
                       ::testing::Values(size_t{0}, size_t{1}, size_t{7}, size_t{1000}, kBig),
                       ::testing::Values(Algorithm::Ring, Algorithm::HalvingDoubling,
                                         Algorithm::RecursiveDoubling, Algorithm::Auto)),
    [](const auto& info) {
      return "n" + std::to_string(std::get<0>(info.param)) + "_count" +
             std::to_string(std::get<1>(info.param)) + "_" +
             std::string(algorithm_name(std::get<2>(info.param)));
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
  EXPECT_EQ(choose_allreduce(1 << 10, 2), Algorithm::RecursiveDoubling);
  EXPECT_EQ(choose_allreduce(1 << 10, 8), Algorithm::RecursiveDoubling);
  EXPECT_EQ(choose_allreduce(kRecursiveDoublingMaxBytes + 4, 8), Algorithm::HalvingDoubling);
  EXPECT_EQ(choose_allreduce(64 << 20, 8), Algorithm::Ring);
  EXPECT_EQ(choose_allreduce(64 << 20, 3), Algorithm::Ring);
}

}  // namespace
}  // namespace cohort::comm
