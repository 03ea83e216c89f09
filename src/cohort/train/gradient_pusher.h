// A step's push to the parameter servers, shard by shard as backward produces the gradients.
//
// Backward computes gradients from the last layer to the first, and a shard of the servers holds a
// contiguous run of the flat parameter vector (ps/layout.h), so most shards have all their
// gradients long before backward ends: a CNN's fully connected layers (most of its bytes, on most
// of the shards) are done first, while the convolutions' backward (most of its compute) is still
// to run. A hook on each parameter copies its gradient, scaled, into the step's flat buffer the
// moment autograd computes it; once every parameter a shard holds a piece of is in, the shard's
// part of the push goes out (ps::PushPullOptions::push_to), together with any other shard ready
// at that moment, on the client's thread while backward goes on. What is left after backward (the
// shards of the first layers, the shards the last gradient completes, and the parameters backward
// gave no gradient: zeros) goes with the pull that follows, in one round trip (BytePS's per-tensor
// push/pull, with servers' shards as the unit).
//
// Every shard takes exactly one part of each clock, in clock order: a part goes out only between
// start() and finish(), and finish() waits for every part of the step.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <list>
#include <memory>
#include <vector>

#include "cohort/ps/client.h"

namespace cohort::train {

class GradientPusher {
 public:
  // `params`: the trained parameters, in the order of the servers' keys; `grads`: the flat buffer
  // their gradients go to (the whole table, alive as long as this).
  GradientPusher(std::vector<torch::Tensor> params, ps::Client& client, std::vector<float>& grads);
  ~GradientPusher();
  GradientPusher(const GradientPusher&) = delete;
  GradientPusher& operator=(const GradientPusher&) = delete;

  // Before backward: the hooks push for `push` (its clock, learning rate and samples), with every
  // gradient multiplied by `scale`.
  void start(const ps::PushPullOptions& push, float scale);
  // After backward: the parameters without a gradient get zeros; waits for the parts already
  // pushed and returns which shards are left (push_to for the push_pull that ends the step; all
  // false when none is), and in *info what the parts' answers said (duplicates, stopped, how long
  // they were held while another worker evaluated). Throws the error of a part that failed.
  std::vector<bool> finish(ps::PullInfo* info);

  // Shard parts pushed while backward was still running, and all parts, since the start.
  int64_t early_parts() const { return early_parts_; }
  int64_t parts() const { return parts_; }

 private:
  void on_gradient(size_t i, const torch::Tensor& grad);
  // Pushes the shards that are ready and not pushed yet, in one call.
  void push_ready();
  void drain();

  struct Param {
    torch::Tensor tensor;
    uint64_t at = 0;             // where its values start in the flat table
    std::vector<size_t> shards;  // the shards holding a piece of it
    bool ready = false;
    unsigned hook = 0;
  };
  std::vector<Param> params_;
  ps::Client& client_;
  std::vector<float>& grads_;
  std::vector<uint64_t> keys_;
  std::vector<size_t> shard_params_;  // how many parameters each shard has a piece of
  std::vector<size_t> pending_;       // ... of which the step's gradient is not in yet
  std::vector<bool> pushed_;
  size_t missing_ = 0;  // parameters whose gradient this step has not had yet
  ps::PushPullOptions push_;
  float scale_ = 1;
  bool in_step_ = false;
  // The parts in flight: their Work and where their answers go.
  struct Part {
    std::shared_ptr<comm::Work> work;
    ps::PullInfo info;
  };
  std::list<Part> parts_in_flight_;
  int64_t early_parts_ = 0, parts_ = 0;
};

}  // namespace cohort::train
