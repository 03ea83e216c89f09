// Straggler detection on constructed busy times (trace/straggler.h).
#include "cohort/trace/straggler.h"

#include <gtest/gtest.h>

namespace cohort::trace {
namespace {

// `ranks` ranks over steps 1..steps, each busy `base` s, except `slow_rank` which is busy
// `slow` s from step `from` on.
BusyTable table(int ranks, int64_t steps, double base, int slow_rank = -1, double slow = 0,
                int64_t from = 1) {
  BusyTable t;
  for (int r = 0; r < ranks; ++r) {
    for (int64_t s = 1; s <= steps; ++s) {
      t[r][s] = (r == slow_rank && s >= from) ? slow : base + 0.0001 * ((r + s) % 3);
    }
  }
  return t;
}

TEST(Stragglers, TheSlowRankAndOnlyItIsNamedWithItsRunOfSteps) {
  auto found = find_stragglers(table(3, 40, 0.010, 2, 0.050, 11), {.margin = 0.25, .window = 10});
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].rank, 2);
  EXPECT_EQ(found[0].first_step, 11);
  EXPECT_EQ(found[0].last_step, 40);
  EXPECT_NEAR(found[0].busy_s, 0.050, 1e-9);
  EXPECT_NEAR(found[0].others_median_s, 0.010, 0.0002);
  EXPECT_NEAR(found[0].ratio(), 5, 0.2);
  EXPECT_NE(found[0].describe().find("rank 2 is a straggler"), std::string::npos);
  EXPECT_NE(found[0].describe().find("steps 11-40"), std::string::npos);
}

TEST(Stragglers, TwoRanksCompareWithTheOther) {
  auto found = find_stragglers(table(2, 30, 0.010, 1, 0.030), {.margin = 0.5, .window = 20});
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].rank, 1);
}

TEST(Stragglers, EvenRanksAndSmallDifferencesAreNotStragglers) {
  EXPECT_TRUE(find_stragglers(table(4, 50, 0.010), {.margin = 0.25, .window = 5}).empty());
  // 20% over the others with a 25% margin: not slow.
  EXPECT_TRUE(
      find_stragglers(table(3, 50, 0.010, 1, 0.012), {.margin = 0.25, .window = 5}).empty());
  // Twice as slow but by less than a millisecond: noise.
  EXPECT_TRUE(
      find_stragglers(table(3, 50, 0.0004, 1, 0.0008), {.margin = 0.25, .window = 5}).empty());
  EXPECT_TRUE(find_stragglers(table(1, 50, 0.010), {.margin = 0.25, .window = 5}).empty());
}

TEST(Stragglers, SlownessMustLastAWindowOfConsecutiveSteps) {
  BusyTable t = table(3, 60, 0.010);
  // Slow at 9 steps in a row, twice, with a normal step between: never a window of 10.
  for (int64_t s = 5; s < 14; ++s) t[0][s] = 0.1;
  for (int64_t s = 15; s < 24; ++s) t[0][s] = 0.1;
  EXPECT_TRUE(find_stragglers(t, {.margin = 0.25, .window = 10}).empty());
  EXPECT_EQ(find_stragglers(t, {.margin = 0.25, .window = 9}).size(), 1u);
  // A step one rank did not report breaks the run as well.
  t[0][30] = t[1][30] = t[2][30] = 0.1;
  for (int64_t s = 31; s < 45; ++s) t[2][s] = 0.1;
  t[1].erase(38);
  EXPECT_TRUE(find_stragglers(t, {.margin = 0.25, .window = 10}).empty());
}

TEST(Stragglers, TheWatchReportsEachRankOnceFromOverlappingReports) {
  StragglerWatch w({.margin = 0.25, .window = 10});
  auto report = [&](int rank, int64_t last, double busy) {
    std::vector<double> v(10, busy);
    w.observe(rank, last - 9, v);
  };
  for (int64_t last = 10; last <= 30; last += 4) {
    report(0, last, 0.01);
    report(1, last, 0.01);
    if (last < 20) {
      report(2, last, 0.01);
      EXPECT_TRUE(w.poll().empty());
    } else {
      report(2, last, 0.05);
      auto fresh = w.poll();
      if (last == 22) {
        // The report ending at step 22 is rank 2's first with 10 slow steps (13-22).
        ASSERT_EQ(fresh.size(), 1u);
        EXPECT_EQ(fresh[0].rank, 2);
      } else {
        EXPECT_TRUE(fresh.empty()) << last;
      }
    }
  }
  // A rank that left is forgotten: its old steps no longer count.
  w.forget(2);
  report(0, 40, 0.01);
  report(1, 40, 0.01);
  EXPECT_TRUE(w.poll().empty());
}

}  // namespace
}  // namespace cohort::trace
