// Training a model a few steps on random images and comparing two models' state bitwise: what the
// checkpoint and snapshot tests restore and check.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>

#include "cohort/train/models.h"

namespace cohort::train::testing {

// `steps` optimizer steps on batches of 8 random 1x28x28 images drawn from `data_seed`.
inline void train_steps(Model& m, torch::optim::Optimizer& opt, int steps, uint64_t data_seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(data_seed);
  m.train();
  for (int s = 0; s < steps; ++s) {
    torch::Tensor x = torch::rand({8, 1, 28, 28}, gen);
    torch::Tensor y = torch::randint(0, 10, {8}, gen, torch::kInt64);
    opt.zero_grad();
    torch::nn::functional::cross_entropy(m.forward(x), y).backward();
    opt.step();
  }
}

// Parameters and buffers, bitwise.
inline void expect_same_state(torch::nn::Module& a, torch::nn::Module& b) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (const auto& p : pa) EXPECT_TRUE(torch::equal(p.value(), pb[p.key()])) << p.key();
  auto ba = a.named_buffers(), bb = b.named_buffers();
  ASSERT_EQ(ba.size(), bb.size());
  for (const auto& x : ba) EXPECT_TRUE(torch::equal(x.value(), bb[x.key()])) << x.key();
}

}  // namespace cohort::train::testing
