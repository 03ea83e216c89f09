// The model zoo and the optimizer factory.
//
//   mlp    Flatten -> Linear(C*H*W, 256) -> ReLU -> Linear(256, 128) -> ReLU -> Linear(128,
//   classes) cnn    Conv(C->32, 5x5, pad 2) -> ReLU -> MaxPool 2 -> Conv(32->64, 5x5, pad 2) ->
//   ReLU
//          -> MaxPool 2 -> Flatten -> Linear(64*(H/4)*(W/4), 128) -> ReLU -> Linear(128, classes)
//   resnet Conv 3x3 (C->16) + BN + ReLU, three stages of two basic blocks (16, 32, 64 channels;
//          the 2nd and 3rd stages halve the resolution), global average pool, Linear(64, classes)
//
// For 28x28 grey images with 10 classes, mlp is exactly 784-256-128-10 and cnn's first linear
// layer is 3136 wide. Initial parameters are a function of the seed alone (drawn from a private
// generator, not the process-wide one), so every rank - or every thread - building the same
// model with the same seed gets bitwise the same weights.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "cohort/train/config.h"

namespace cohort::train {

class Model;
using ModelPtr = std::shared_ptr<Model>;

// A classifier: images [B, C, H, W] (float) -> logits [B, classes].
class Model : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(torch::Tensor images) = 0;
  // The layout its 4-D parameters have and its input is given (ModelConfig::memory_format
  // resolved): channels_last or contiguous.
  MemoryFormat memory_format() const { return memory_format_; }
  // The input in the model's layout (a no-op when it already is); forward() applies it.
  torch::Tensor in_layout(const torch::Tensor& images) const;

 private:
  friend ModelPtr make_model(const ModelConfig&, const InputSpec&, uint64_t);
  MemoryFormat memory_format_ = MemoryFormat::Contiguous;
};

ModelPtr make_model(const ModelConfig& config, const InputSpec& input, uint64_t seed);

// SGD (momentum, weight decay) or Adam (betas, eps, weight decay) over `params`, at config.lr.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerConfig& config,
                                                        const std::vector<torch::Tensor>& params);
// Sets / reads the learning rate of every parameter group.
void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);
double learning_rate(torch::optim::Optimizer& optimizer);

}  // namespace cohort::train
