// How long a Python step sat blocked on its collectives: waits, DDP-style futures, and both.
#include "cohort/trace/exchange_clock.h"

#include <gtest/gtest.h>

namespace cohort::trace {
namespace {

TEST(ExchangeClock, WaitsAddUpAndTheLastOneStartsTheStepsReadiness) {
  ExchangeClock c;
  c.waited(1'000, 1'500);
  c.waited(3'000, 3'200);
  const auto x = c.take(4'000);
  EXPECT_DOUBLE_EQ(x.blocked_s, 700e-6);
  EXPECT_EQ(x.ready_us, 3'000);
  // The next interval starts empty: nothing blocked, ready at its end.
  const auto y = c.take(5'000);
  EXPECT_DOUBLE_EQ(y.blocked_s, 0);
  EXPECT_EQ(y.ready_us, 5'000);
}

TEST(ExchangeClock, FuturesBlockFromTheLastIssueUntilTheLastOneFinished) {
  // DDP: buckets issued during backward (1,000 and 2,000); the first finishes before the last is
  // issued, the second 800 us after: the step was blocked from the last issue on.
  ExchangeClock c;
  c.future_issued(1'000);
  c.future_finished(1'600);
  c.future_issued(2'000);
  c.future_finished(2'800);
  auto x = c.take(3'000);
  EXPECT_DOUBLE_EQ(x.blocked_s, 800e-6);
  EXPECT_EQ(x.ready_us, 2'000);

  // The order they are recorded in does not matter: a future taken after its operation finished
  // has its finish recorded first.
  c.future_finished(4'100);
  c.future_issued(4'000);
  x = c.take(5'000);
  EXPECT_DOUBLE_EQ(x.blocked_s, 100e-6);
  EXPECT_EQ(x.ready_us, 4'000);
}

TEST(ExchangeClock, AStepAddsItsWaitsToItsFutures) {
  // DDP's buckets, then a loss allreduce waited on synchronously: both count; the gradients'
  // readiness is the last bucket's issue, not the loss's.
  ExchangeClock c;
  c.future_issued(1'000);
  c.future_finished(1'300);
  c.waited(2'000, 2'100);
  auto x = c.take(3'000);
  EXPECT_DOUBLE_EQ(x.blocked_s, 400e-6);
  EXPECT_EQ(x.ready_us, 1'000);

  // A future still running at the report did not hold the step; its finish, recorded in the
  // next interval without an issue there, counts for nothing.
  c.future_issued(3'500);
  x = c.take(4'000);
  EXPECT_DOUBLE_EQ(x.blocked_s, 0);
  EXPECT_EQ(x.ready_us, 3'500);
  c.future_finished(4'500);
  x = c.take(5'000);
  EXPECT_DOUBLE_EQ(x.blocked_s, 0);
  EXPECT_EQ(x.ready_us, 5'000);
}

}  // namespace
}  // namespace cohort::trace
