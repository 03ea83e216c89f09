// The servers' optimizers against the formulas of libtorch's SGD and Adam, computed here in
// double precision (the training tests compare with libtorch itself: tests/e2e/ps_test.cc).
#include "cohort/ps/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace cohort::ps {
namespace {

std::vector<float> grad_at(int step) {
  return {0.5f + 0.1f * static_cast<float>(step), -1.0f, 0.25f * static_cast<float>(step % 3)};
}

TEST(ServerOptimizer, SgdWithMomentumNesterovAndWeightDecayFollowsTorch) {
  for (bool nesterov : {false, true}) {
    OptimizerSettings s{
        .kind = OptimizerKind::Sgd, .momentum = 0.9, .nesterov = nesterov, .weight_decay = 0.01};
    OptimizerState st;
    std::vector<float> p = {1.0f, -2.0f, 0.5f};
    std::vector<double> ref(p.begin(), p.end()), buf(3, 0);
    for (int step = 0; step < 5; ++step) {
      auto g = grad_at(step);
      optimizer_step(s, st, p, g, 0.1);
      for (size_t i = 0; i < 3; ++i) {
        double d = g[i] + 0.01 * ref[i];
        buf[i] = step == 0 ? d : 0.9 * buf[i] + d;  // the first step takes the gradient itself
        d = nesterov ? d + 0.9 * buf[i] : buf[i];
        ref[i] -= 0.1 * d;
      }
    }
    for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(p[i], ref[i], 1e-5) << "nesterov " << nesterov;
    EXPECT_EQ(st.steps, 5);
  }
}

TEST(ServerOptimizer, PlainSgdKeepsNoState) {
  OptimizerSettings s{.kind = OptimizerKind::Sgd};
  OptimizerState st;
  std::vector<float> p = {1.0f};
  std::vector<float> g = {2.0f};
  optimizer_step(s, st, p, g, 0.25);
  EXPECT_FLOAT_EQ(p[0], 0.5f);
  EXPECT_TRUE(st.first.empty());
}

TEST(ServerOptimizer, AdamWithBiasCorrectionFollowsTorch) {
  OptimizerSettings s{.kind = OptimizerKind::Adam,
                      .weight_decay = 0.001,
                      .beta1 = 0.9,
                      .beta2 = 0.999,
                      .eps = 1e-8};
  OptimizerState st;
  std::vector<float> p = {1.0f, -2.0f, 0.5f};
  std::vector<double> ref(p.begin(), p.end()), m(3, 0), v(3, 0);
  for (int step = 1; step <= 6; ++step) {
    auto g = grad_at(step);
    optimizer_step(s, st, p, g, 0.01);
    const double bc1 = 1 - std::pow(0.9, step), bc2 = 1 - std::pow(0.999, step);
    for (size_t i = 0; i < 3; ++i) {
      const double d = g[i] + 0.001 * ref[i];
      m[i] = 0.9 * m[i] + 0.1 * d;
      v[i] = 0.999 * v[i] + 0.001 * d * d;
      ref[i] -= 0.01 / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + 1e-8);
    }
  }
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(p[i], ref[i], 1e-5);
}

}  // namespace
}  // namespace cohort::ps
