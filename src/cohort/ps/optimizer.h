// The optimizer a parameter server applies to its shard: the same arithmetic as libtorch's
// torch::optim::SGD and torch::optim::Adam (the workers' optimizers in the other modes), element
// by element on f32, so that a server stepping on the mean gradient lands where an allreduce job's
// workers do, to float rounding.
//
//   sgd:  g += weight_decay * p;  buf = g on the first step, else momentum * buf + g;
//         g = nesterov ? g + momentum * buf : buf;  p -= lr * g
//   adam: g += weight_decay * p;  t += 1;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//         p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace cohort::ps {

enum class OptimizerKind : uint8_t { Sgd = 1, Adam = 2 };

struct OptimizerSettings {
  OptimizerKind kind = OptimizerKind::Sgd;
  double momentum = 0;  // sgd
  bool nesterov = false;
  double weight_decay = 0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // adam
  bool operator==(const OptimizerSettings&) const = default;
};

// What the optimizer keeps per value of the shard between steps.
struct OptimizerState {
  std::vector<float> first;   // sgd: the momentum buffer; adam: m
  std::vector<float> second;  // adam: v
  int64_t steps = 0;          // steps taken (sgd: whether the buffer holds anything yet)
  bool operator==(const OptimizerState&) const = default;
};

// One step of `params` (the shard) on `grad` at learning rate `lr`. `state` is sized on first use.
void optimizer_step(const OptimizerSettings& s, OptimizerState& state, std::span<float> params,
                    std::span<const float> grad, double lr);

std::string optimizer_name(OptimizerKind k);  // "sgd" | "adam"

}  // namespace cohort::ps
