#include "cohort/ps/shard.h"

#include <gtest/gtest.h>

#include <vector>

#include "cohort/base/error.h"

namespace cohort::ps {
namespace {

ShardSettings sgd(int slots, Consistency c, Correction corr = Correction::None) {
  return {.slots = slots,
          .consistency = c,
          .optimizer = {.kind = OptimizerKind::Sgd},
          .correction = corr,
          .dc_lambda = 0.5};
}

// A push of `values` over the whole shard [0, n).
bool push(Shard& s, uint32_t slot, int64_t clock, std::vector<float> values, double lr = 1.0,
          SampleCounts counts = {}) {
  const std::vector<Range> r = {{0, values.size()}};
  return s.push(slot, clock, lr, r, values.data(), counts);
}

std::vector<float> read_all(Shard& s, uint32_t slot) {
  std::vector<float> out(s.range().count);
  const std::vector<Range> r = {s.range()};
  s.read(r, out.data());
  s.note_read(slot);
  return out;
}

TEST(Shard, SspAppliesAClockOnceEverySlotPushedItAsOneStepOfTheSum) {
  Shard s(sgd(2, Consistency::Ssp), {0, 2}, {10.0f, 20.0f});
  EXPECT_TRUE(push(s, 0, 0, {1.0f, 2.0f}));
  EXPECT_EQ(s.version(), 0);  // slot 1 has not pushed clock 0
  EXPECT_EQ(s.params(), (std::vector<float>{10.0f, 20.0f}));
  EXPECT_TRUE(push(s, 0, 1, {100.0f, 100.0f}));  // slot 0 runs ahead: clock 1 waits too
  EXPECT_TRUE(push(s, 1, 0, {3.0f, 4.0f}));
  EXPECT_EQ(s.version(), 1);
  EXPECT_EQ(s.params(), (std::vector<float>{6.0f, 14.0f}));  // 10 - (1 + 3), 20 - (2 + 4)
  EXPECT_EQ(s.min_clock(), 1);
  EXPECT_EQ(s.applied(), 3u);
  EXPECT_EQ(s.slot_clocks(), (std::vector<int64_t>{2, 1}));
}

TEST(Shard, APushSentAgainIsADuplicateAndAClockSkippedIsRefused) {
  Shard s(sgd(1, Consistency::Async), {0, 1}, {0.0f});
  EXPECT_TRUE(push(s, 0, 0, {1.0f}, 1.0, {.epoch = 0, .samples = 4}));
  EXPECT_FALSE(push(s, 0, 0, {1.0f}, 1.0, {.epoch = 0, .samples = 4}));
  EXPECT_EQ(s.params()[0], -1.0f);
  EXPECT_EQ(s.applied(), 1u);
  EXPECT_EQ(s.counts().at(0).samples, 4.0);  // counted once
  EXPECT_THROW(push(s, 0, 5, {1.0f}), Error);
  EXPECT_THROW(push(s, 3, 1, {1.0f}), Error);
  const std::vector<Range> outside = {{0, 2}};
  const float two[2] = {1, 1};
  EXPECT_THROW(s.push(0, 1, 1.0, outside, two, {}), Error);
  EXPECT_EQ(s.next_clock(0), 1);  // nothing of the refused pushes stayed
}

TEST(Shard, AsyncAppliesEveryPushAtOnce) {
  Shard s(sgd(2, Consistency::Async), {0, 1}, {0.0f});
  push(s, 0, 0, {1.0f});
  EXPECT_EQ(s.version(), 1);
  push(s, 0, 1, {1.0f});
  push(s, 0, 2, {1.0f});
  EXPECT_EQ(s.version(), 3);
  EXPECT_EQ(s.params()[0], -3.0f);
  EXPECT_EQ(s.min_clock(), 0);  // slot 1 has pushed nothing
}

TEST(Shard, InverseStalenessScalesAGradientByTheClocksItMissed) {
  // Two slots, async: slot 1 reads at version 0, then slot 0 pushes 4 times (2 clocks' worth).
  Shard s(sgd(2, Consistency::Async, Correction::InverseStaleness), {0, 1}, {0.0f});
  read_all(s, 1);
  for (int c = 0; c < 4; ++c) push(s, 0, c, {0.0f});
  push(s, 1, 0, {8.0f});
  EXPECT_FLOAT_EQ(s.params()[0], -4.0f);  // 8 / staleness 2
  // A fresh gradient is not scaled.
  read_all(s, 1);
  push(s, 1, 1, {8.0f});
  EXPECT_FLOAT_EQ(s.params()[0], -12.0f);
  EXPECT_EQ(s.staleness_histogram()[2], 1u);
}

TEST(Shard, DelayCompensationAddsLambdaGSquaredTimesHowFarTheShardMoved) {
  Shard s(sgd(2, Consistency::Async, Correction::DelayCompensation), {0, 1}, {1.0f});
  read_all(s, 1);         // slot 1 reads w = 1
  push(s, 0, 0, {2.0f});  // w = -1
  push(s, 1, 0, {1.0f});  // g~ = 1 + 0.5 * 1 * 1 * (-1 - 1) = 0
  EXPECT_FLOAT_EQ(s.params()[0], -1.0f);
}

TEST(Shard, RetiringASlotLetsItsWaitingClocksComplete) {
  Shard s(sgd(3, Consistency::Ssp), {0, 1}, {0.0f});
  push(s, 0, 0, {1.0f});
  push(s, 1, 0, {2.0f});
  EXPECT_EQ(s.version(), 0);
  s.retire(2);
  EXPECT_EQ(s.version(), 1);
  EXPECT_FLOAT_EQ(s.params()[0], -3.0f);
  EXPECT_THROW(push(s, 2, 0, {5.0f}), Error);
  EXPECT_EQ(s.min_clock(), 1);
}

// A retired slot's acknowledged pushes are not dropped: a clock it pushed is applied with its
// contribution once the others complete it.
TEST(Shard, ARetiredSlotsAcknowledgedPushesAreStillApplied) {
  Shard s(sgd(3, Consistency::Ssp), {0, 1}, {0.0f});
  push(s, 0, 0, {1.0f});
  push(s, 2, 0, {4.0f});
  push(s, 2, 1, {8.0f});
  s.retire(2);
  EXPECT_EQ(s.version(), 0);
  push(s, 1, 0, {2.0f});
  EXPECT_EQ(s.version(), 1);
  EXPECT_FLOAT_EQ(s.params()[0], -7.0f);
  push(s, 0, 1, {1.0f});
  push(s, 1, 1, {1.0f});
  EXPECT_EQ(s.version(), 2);
  EXPECT_FLOAT_EQ(s.params()[0], -17.0f);
}

TEST(Shard, SavedAndRestoredItIsTheSameShardPendingClocksIncluded) {
  const ShardSettings set = sgd(2, Consistency::Ssp, Correction::DelayCompensation);
  Shard s(set, {4, 2}, {1.0f, 2.0f});
  const std::vector<Range> r = {{4, 2}};
  const float g[2] = {0.5f, -0.5f};
  s.push(0, 0, 0.1, r, g, {.epoch = 1, .samples = 3, .id_sum = 7, .id_sq_sum = 9});
  s.push(1, 0, 0.1, r, g, {});
  s.push(0, 1, 0.1, r, g, {});  // pending
  Shard back = Shard::restore(set, s.save());
  EXPECT_EQ(back.save(), s.save());
  // Both go on the same way.
  s.push(1, 1, 0.1, r, g, {});
  back.push(1, 1, 0.1, r, g, {});
  EXPECT_EQ(back.params(), s.params());
  EXPECT_EQ(back.version(), 2);
  EXPECT_EQ(back.counts().at(1).id_sum, 7.0);
}

// A shard saved without a correction, with a clock still pending, restored where the job now
// asks for delay compensation (a resume with sync.delay_compensation set): the pending push is
// compensated from the restored parameters (no move since), as a push read then would be.
TEST(Shard, APendingPushSavedWithoutCorrectionIsRestoredUnderDelayCompensation) {
  Shard s(sgd(2, Consistency::Ssp), {0, 2}, {1.0f, 2.0f});
  const std::vector<Range> r = {{0, 2}};
  const float g[2] = {0.5f, -0.5f};
  s.push(0, 0, 0.1, r, g, {});  // pending: slot 1 has not pushed clock 0
  Shard back = Shard::restore(sgd(2, Consistency::Ssp, Correction::DelayCompensation), s.save());
  back.push(1, 0, 0.1, r, g, {});
  s.push(1, 0, 0.1, r, g, {});
  // The parameters did not move between the reads and the step: the same step either way.
  EXPECT_EQ(back.version(), 1);
  EXPECT_EQ(back.params(), s.params());
}

TEST(Shard, EveryTruncationOfASavedShardIsRefusedCleanly) {
  Shard s(sgd(2, Consistency::Ssp), {0, 3}, {1.0f, 2.0f, 3.0f});
  push(s, 0, 0, {1, 1, 1});
  const auto saved = s.save();
  for (size_t n = 0; n < saved.size(); ++n) {
    std::vector<uint8_t> cut(saved.begin(), saved.begin() + static_cast<long>(n));
    EXPECT_THROW(Shard::restore(sgd(2, Consistency::Ssp), cut), ProtocolError) << n;
  }
  auto longer = saved;
  longer.push_back(0);
  EXPECT_THROW(Shard::restore(sgd(2, Consistency::Ssp), longer), ProtocolError);
  EXPECT_THROW(Shard::restore(sgd(3, Consistency::Ssp), saved), ProtocolError);
}

}  // namespace
}  // namespace cohort::ps
