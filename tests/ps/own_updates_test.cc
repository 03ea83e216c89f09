#include "cohort/ps/own_updates.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/ps/shard.h"

namespace cohort::ps {
namespace {

constexpr double kLr = 0.1;
constexpr double kMomentum = 0.9;
const OptimizerSettings kSgd{.kind = OptimizerKind::Sgd, .momentum = kMomentum};

// Two ssp workers on one shard holding a quadratic's parameters, worker i minimising
// 0.5 * h * (w - target[i])^2 element by element; their mean objective's minimum is the mean of
// the targets. Every clock both push, the shard applies the clock, and each then trains on the
// parameters of `delay` clocks before (as ssp allows a worker with staleness >= delay to see),
// with or without its own updates added.
class DelayedSsp {
 public:
  DelayedSsp(std::vector<float> curvature, std::vector<std::vector<float>> targets, int delay,
             bool read_my_writes)
      : h_(std::move(curvature)),
        targets_(std::move(targets)),
        delay_(delay),
        shard_({.slots = 2, .consistency = Consistency::Ssp, .optimizer = kSgd}, {0, h_.size()},
               std::vector<float>(h_.size(), 1.0f)) {
    const Layout layout({h_.size()}, 1);
    for (int i = 0; i < 2; ++i) {
      views_.push_back(shard_.params());
      if (read_my_writes) own_.emplace_back(kSgd, layout);
    }
    history_[0] = shard_.params();
  }

  void run(int clocks) {
    for (int c = 0; c < clocks; ++c) {
      for (uint32_t i = 0; i < 2; ++i) {
        std::vector<float> g(h_.size());
        // Scaled for the shard's sum over the two workers, as a worker pushes.
        for (size_t k = 0; k < g.size(); ++k) g[k] = 0.5f * h_[k] * (views_[i][k] - targets_[i][k]);
        if (!own_.empty()) own_[i].pushed(c, g, 2.0f, views_[i], kLr);
        const std::vector<Range> r = {shard_.range()};
        shard_.push(i, c, kLr, r, g.data(), {});
      }
      history_[shard_.version()] = shard_.params();
      const int64_t seen = std::max<int64_t>(0, shard_.version() - delay_);
      for (size_t i = 0; i < 2; ++i) {
        views_[i] = history_.at(seen);
        if (!own_.empty()) {
          const std::vector<int64_t> versions = {seen};
          own_[i].apply(views_[i], versions);
        }
      }
    }
  }

  const std::vector<float>& params() const { return shard_.params(); }
  const std::vector<float>& view(size_t i) const { return views_[i]; }
  const OwnUpdates& own(size_t i) const { return own_[i]; }

 private:
  std::vector<float> h_;
  std::vector<std::vector<float>> targets_;
  int delay_;
  Shard shard_;
  std::vector<std::vector<float>> views_;
  std::vector<OwnUpdates> own_;
  std::map<int64_t, std::vector<float>> history_;
};

// The same objective trained synchronously: one step of the mean gradient per clock.
std::vector<float> synchronous(const std::vector<float>& h, int clocks) {
  std::vector<float> w(h.size(), 1.0f);
  OptimizerState state;
  for (int c = 0; c < clocks; ++c) {
    std::vector<float> g(h.size());
    for (size_t k = 0; k < g.size(); ++k) g[k] = h[k] * w[k];
    optimizer_step(kSgd, state, w, g, kLr);
  }
  return w;
}

double largest(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

// lr * h up to 1: stable for heavy-ball SGD with momentum 0.9 without delay (below 3.8), far
// beyond what it tolerates two clocks late (0.05).
const std::vector<float> kCurvature = {10.0f, 3.0f, 1.0f, 0.1f};
const std::vector<std::vector<float>> kSameTarget = {{0, 0, 0, 0}, {0, 0, 0, 0}};

TEST(OwnUpdates, WithoutThemTwoClocksOfStalenessMakeMomentumSgdDiverge) {
  DelayedSsp stale(kCurvature, kSameTarget, 2, false);
  stale.run(200);
  EXPECT_GT(largest(stale.params()), 1e3);
}

TEST(OwnUpdates, WhenEveryWorkerHasTheSameGradientTheyTrainOnTheSynchronousParameters) {
  for (int delay : {1, 2, 3}) {
    SCOPED_TRACE("delay " + std::to_string(delay));
    DelayedSsp ssp(kCurvature, kSameTarget, delay, true);
    ssp.run(60);
    const std::vector<float> sync = synchronous(kCurvature, 60);
    for (size_t k = 0; k < sync.size(); ++k) {
      EXPECT_NEAR(ssp.params()[k], sync[k], 1e-5 + 1e-4 * std::fabs(sync[k])) << "value " << k;
      // The view holds every clock pushed, though what was pulled lacked the last `delay`.
      EXPECT_NEAR(ssp.view(0)[k], sync[k], 1e-5 + 1e-4 * std::fabs(sync[k])) << "value " << k;
    }
    EXPECT_EQ(ssp.own(0).pending(), static_cast<size_t>(delay));  // the clocks the view lacked
  }
}

TEST(OwnUpdates, WorkersWithDifferentGradientsConvergeToTheMeanObjectivesMinimum) {
  const std::vector<std::vector<float>> targets = {{1, 1, 1, 1}, {-1, -1, -1, 3}};
  DelayedSsp ssp(kCurvature, targets, 2, true);
  ssp.run(2000);
  const std::vector<float> optimum = {0, 0, 0, 2};
  for (size_t k = 0; k < optimum.size(); ++k) EXPECT_NEAR(ssp.params()[k], optimum[k], 1e-3);
}

TEST(OwnUpdates, EachShardGetsTheStepsOfTheClocksItLacksAndEachStepIsForgottenOnceAllHoldIt) {
  const Layout layout({2, 2}, 2);  // shard 0: values 0-1, shard 1: values 2-3
  OwnUpdates own({.kind = OptimizerKind::Sgd}, layout);
  const std::vector<float> at = {0, 0, 0, 0};
  own.pushed(5, std::vector<float>{1, 1, 1, 1}, 1.0f, at, 1.0);  // step -1 on every value
  own.pushed(6, std::vector<float>{1, 2, 3, 4}, 0.5f, at, 2.0);  // step -(0.5, 1, 1.5, 2) * 2
  std::vector<float> params = {10, 10, 10, 10};
  own.apply(params, std::vector<int64_t>{6, 5});  // shard 0 holds clock 5, shard 1 neither
  EXPECT_EQ(params, (std::vector<float>{9, 8, 6, 5}));
  EXPECT_EQ(own.pending(), 2u);
  EXPECT_EQ(own.added(), 3u);  // clock 6 on shard 0, both on shard 1
  params = {10, 10, 10, 10};
  own.apply(params, std::vector<int64_t>{7, 6});  // clock 5 everywhere: forgotten
  EXPECT_EQ(params, (std::vector<float>{10, 10, 7, 6}));
  EXPECT_EQ(own.pending(), 1u);
  params = {10, 10, 10, 10};
  own.apply(params, std::vector<int64_t>{-1, 6});  // shard 0 not pulled: left alone
  EXPECT_EQ(params, (std::vector<float>{10, 10, 7, 6}));
  EXPECT_EQ(own.pending(), 1u);
  own.clear();
  params = {10, 10, 10, 10};
  own.apply(params, std::vector<int64_t>{0, 0});
  EXPECT_EQ(params, (std::vector<float>{10, 10, 10, 10}));
}

TEST(OwnUpdates, SizesOtherThanTheLayoutsAreRefused) {
  OwnUpdates own({.kind = OptimizerKind::Sgd}, Layout({3}, 1));
  const std::vector<float> three = {0, 0, 0}, two = {0, 0};
  EXPECT_THROW(own.pushed(0, two, 1.0f, three, 1.0), Error);
  EXPECT_THROW(own.pushed(0, three, 1.0f, two, 1.0), Error);
  std::vector<float> params = {0, 0, 0};
  EXPECT_THROW(own.apply(params, std::vector<int64_t>{0, 0}), Error);
  std::vector<float> short_params = {0, 0};
  EXPECT_THROW(own.apply(short_params, std::vector<int64_t>{0}), Error);
}

}  // namespace
}  // namespace cohort::ps
