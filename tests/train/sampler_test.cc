#include "cohort/train/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "cohort/base/error.h"

namespace cohort::train {
namespace {

std::vector<DistributedSampler> world(int64_t n, int w, int64_t b, uint64_t seed = 1,
                                      bool drop_last = false) {
  std::vector<DistributedSampler> out;
  for (int r = 0; r < w; ++r) {
    out.emplace_back(SamplerOptions{.dataset_size = n,
                                    .world_size = w,
                                    .rank = r,
                                    .batch_size = b,
                                    .seed = seed,
                                    .drop_last = drop_last});
  }
  return out;
}

// Runs every rank in lock-step for at most `max_steps` steps (all if negative); checks that the
// ranks agree on step counts and global batch sizes; returns every index taken.
std::vector<int64_t> run(std::vector<DistributedSampler>& ranks, int64_t max_steps = -1) {
  std::vector<int64_t> taken;
  int64_t prev_step = -1;
  for (int64_t s = 0; max_steps < 0 || s < max_steps; ++s) {
    std::vector<std::optional<Batch>> batches;
    for (auto& r : ranks) batches.push_back(r.next());
    bool any = false, all = true;
    for (auto& b : batches) any = any || b.has_value(), all = all && b.has_value();
    EXPECT_EQ(any, all) << "ranks disagree on the end of the epoch at step " << s;
    if (!all) break;
    int64_t sum = 0;
    for (auto& b : batches) {
      EXPECT_EQ(b->global_batch, batches[0]->global_batch);
      EXPECT_EQ(b->step, batches[0]->step);
      sum += static_cast<int64_t>(b->indices.size());
      taken.insert(taken.end(), b->indices.begin(), b->indices.end());
    }
    EXPECT_EQ(sum, batches[0]->global_batch);
    if (prev_step >= 0) {
      EXPECT_EQ(batches[0]->step, prev_step + 1);
    }
    prev_step = batches[0]->step;
  }
  return taken;
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

TEST(DistributedSampler, EveryShapeUsesEverySampleExactlyOnce) {
  for (int64_t n : {1, 2, 7, 64, 100, 1001}) {
    for (int w : {1, 2, 3, 8}) {
      for (int64_t b : {1, 4, 33}) {
        auto ranks = world(n, w, b);
        const int64_t steps = ranks[0].steps_per_epoch();
        EXPECT_EQ(steps, (n + w * b - 1) / (w * b));
        std::vector<int64_t> taken = run(ranks);
        std::sort(taken.begin(), taken.end());
        EXPECT_EQ(taken, iota(n)) << "n " << n << " w " << w << " b " << b;
        EXPECT_EQ(ranks[0].consumed(), n);
        EXPECT_EQ(ranks[0].steps_remaining(), 0);
      }
    }
  }
}

TEST(DistributedSampler, TailIsSplitEvenly) {
  // 10 samples, 3 ranks, batch 2: one full global batch of 6, then a tail of 4 split 2/1/1.
  auto ranks = world(10, 3, 2);
  for (auto& r : ranks) EXPECT_EQ(r.next()->indices.size(), 2u);
  std::vector<size_t> tail;
  for (auto& r : ranks) {
    auto b = r.next();
    EXPECT_EQ(b->global_batch, 4);
    tail.push_back(b->indices.size());
  }
  EXPECT_EQ(tail, (std::vector<size_t>{2, 1, 1}));
  for (auto& r : ranks) EXPECT_FALSE(r.next().has_value());
}

// sync.balance: shares follow the weights, the slices still tile every global batch, and the
// epoch still uses every sample once, also when the shares change mid-epoch.
TEST(DistributedSampler, SharesSplitEachGlobalBatchByWeight) {
  auto ranks = world(1000, 3, 10);
  for (auto& r : ranks) r.set_shares({1, 1, 1});
  EXPECT_EQ(ranks[0].slice_counts(30), (std::vector<int64_t>{10, 10, 10}));
  EXPECT_EQ(ranks[0].slice_counts(4), (std::vector<int64_t>{2, 1, 1}));  // as without shares
  for (auto& r : ranks) r.set_shares({2, 1, 0.5});  // rank 2 is 4x slower than rank 0
  EXPECT_EQ(ranks[0].slice_counts(30), (std::vector<int64_t>{17, 9, 4}));
  EXPECT_EQ(ranks[0].slice_counts(3), (std::vector<int64_t>{1, 1, 1}));  // one sample each
  std::vector<int64_t> taken = run(ranks, 10);
  for (auto& r : ranks) r.set_shares({1, 5, 1});
  std::vector<int64_t> rest = run(ranks);
  taken.insert(taken.end(), rest.begin(), rest.end());
  std::sort(taken.begin(), taken.end());
  EXPECT_EQ(taken, iota(1000));
  EXPECT_EQ(ranks[0].steps_per_epoch(), 34);
  EXPECT_THROW(ranks[0].set_shares({1, 1}), Error);
  EXPECT_THROW(ranks[0].set_shares({1, 0, 1}), Error);
}

TEST(DistributedSampler, DropLastKeepsOnlyFullBatches) {
  auto ranks = world(100, 3, 8, 5, /*drop_last=*/true);
  EXPECT_EQ(ranks[0].steps_per_epoch(), 4);  // 100 / 24
  std::vector<int64_t> taken = run(ranks);
  EXPECT_EQ(taken.size(), 96u);
  std::sort(taken.begin(), taken.end());
  EXPECT_EQ(std::adjacent_find(taken.begin(), taken.end()), taken.end()) << "a repeated sample";
}

TEST(DistributedSampler, PermutationIsDeterministicPerSeedAndEpoch) {
  auto p = DistributedSampler::permutation(1000, 42, 3);
  EXPECT_EQ(p, DistributedSampler::permutation(1000, 42, 3));
  EXPECT_NE(p, DistributedSampler::permutation(1000, 42, 4));
  EXPECT_NE(p, DistributedSampler::permutation(1000, 43, 3));
  EXPECT_NE(p, iota(1000));
  auto sorted = p;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, iota(1000));
  // Two samplers of the same rank agree; two epochs of one sampler do not.
  auto a = world(500, 2, 10, 9), b = world(500, 2, 10, 9);
  EXPECT_EQ(run(a), run(b));
  a[0].reset(1);
  a[1].reset(1);
  b[0].reset(2);
  b[1].reset(2);
  EXPECT_NE(run(a), run(b));
}

TEST(DistributedSampler, ResumeMidEpochContinuesExactly) {
  auto full = world(1000, 4, 16, 7);
  for (auto& r : full) r.reset(2);
  std::vector<int64_t> first = run(full, 5);
  const int64_t consumed = full[0].consumed();
  EXPECT_EQ(consumed, 5 * 4 * 16);
  std::vector<int64_t> rest = run(full);

  // Fresh samplers resumed at (epoch 2, consumed) take exactly what the original took next.
  auto resumed = world(1000, 4, 16, 7);
  for (auto& r : resumed) r.reset(2, consumed);
  EXPECT_EQ(resumed[0].steps_remaining(), full[0].steps_per_epoch() - 5);
  EXPECT_EQ(run(resumed), rest);
}

TEST(DistributedSampler, ReshardForANewWorldSize) {
  // 3 ranks train 7 steps; then 2 ranks (and a different batch size) continue from the consumed
  // count, then 5 ranks: every sample of the epoch is still used exactly once.
  const int64_t n = 1234;
  auto three = world(n, 3, 10, 11);
  std::vector<int64_t> taken = run(three, 7);
  auto two = world(n, 2, 13, 11);
  for (auto& r : two) r.reset(0, three[0].consumed());
  auto more = run(two, 9);
  taken.insert(taken.end(), more.begin(), more.end());
  auto five = world(n, 5, 8, 11);
  for (auto& r : five) r.reset(0, two[0].consumed());
  more = run(five);
  taken.insert(taken.end(), more.begin(), more.end());
  std::sort(taken.begin(), taken.end());
  EXPECT_EQ(taken, iota(n));
}

TEST(DistributedSampler, RejectsInvalidOptions) {
  EXPECT_THROW(DistributedSampler({.dataset_size = 0}), Error);
  EXPECT_THROW(DistributedSampler({.dataset_size = 10, .world_size = 2, .rank = 2}), Error);
  EXPECT_THROW(DistributedSampler({.dataset_size = 10, .batch_size = 0}), Error);
  DistributedSampler s({.dataset_size = 10});
  EXPECT_THROW(s.reset(0, 11), Error);
  EXPECT_THROW(s.reset(-1, 0), Error);
}

}  // namespace
}  // namespace cohort::train
