// The fault injector's slowdowns: slow faults by seconds or by a factor of the step's own time,
// and stragglers, whose window's straggler every rank agrees on.
#include "cohort/train/faults.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace cohort::train {
namespace {

TEST(FaultInjector, SlowFaultsAddSecondsOrAFactorOfTheStepsOwnTime) {
  const std::vector<FaultConfig> faults = {
      {.kind = FaultKind::Slow, .rank = 1, .at_step = 5, .seconds = 0.25},
      {.kind = FaultKind::Slow, .rank = 2, .at_step = 0, .factor = 2.5}};
  FaultInjector r0(faults, 0, 3, 7), r1(faults, 1, 3, 7), r2(faults, 2, 3, 7);
  EXPECT_EQ(r0.slowdown(10, 0.1), 0);
  EXPECT_EQ(r1.slowdown(4, 0.1), 0);  // not yet
  EXPECT_DOUBLE_EQ(r1.slowdown(5, 0.1), 0.25);
  EXPECT_DOUBLE_EQ(r1.slowdown(6, 3.0), 0.25);
  // 2.5 x its own 0.2 s: 0.3 s more.
  EXPECT_DOUBLE_EQ(r2.slowdown(0, 0.2), 0.3);
}

TEST(FaultInjector, EachWindowHasOneStragglerThatEveryRankAgreesOn) {
  const int workers = 4;
  const std::vector<FaultConfig> faults = {
      {.kind = FaultKind::Stragglers, .at_step = 10, .factor = 3, .every = 10}};
  std::vector<FaultInjector> ranks;
  for (int r = 0; r < workers; ++r) ranks.emplace_back(faults, r, workers, 42);
  std::set<int64_t> chosen;
  for (int64_t step = 0; step < 10; ++step) {
    for (const auto& f : ranks) EXPECT_EQ(f.slowdown(step, 1.0), 0) << "before at_step";
  }
  for (int64_t window = 0; window < 40; ++window) {
    int64_t straggler = -1;
    for (int64_t step = 10 + 10 * window; step < 20 + 10 * window; ++step) {
      int slowed = 0;
      for (int r = 0; r < workers; ++r) {
        const double s = ranks[static_cast<size_t>(r)].slowdown(step, 0.5);
        if (s == 0) continue;
        EXPECT_DOUBLE_EQ(s, 1.0);  // 3 x 0.5 s
        ++slowed;
        if (straggler < 0) straggler = r;
        EXPECT_EQ(straggler, r) << "the straggler changed inside window " << window;
      }
      EXPECT_EQ(slowed, 1) << "step " << step;
    }
    chosen.insert(straggler);
  }
  // Chosen at random: over 40 windows every one of 4 workers is a straggler at some point.
  EXPECT_EQ(chosen.size(), 4u);
  // The choice follows the job's seed.
  int differ = 0;
  for (int64_t window = 0; window < 20; ++window) {
    differ += FaultInjector::straggler(faults[0], 10 + 10 * window, workers, 42) !=
              FaultInjector::straggler(faults[0], 10 + 10 * window, workers, 43);
  }
  EXPECT_GT(differ, 0);
}

}  // namespace
}  // namespace cohort::train
