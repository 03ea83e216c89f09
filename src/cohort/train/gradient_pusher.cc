#include "cohort/train/gradient_pusher.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <string>

#include "cohort/base/error.h"
#include "cohort/base/log.h"

namespace cohort::train {

GradientPusher::GradientPusher(std::vector<torch::Tensor> params, ps::Client& client,
                               std::vector<float>& grads)
    : client_(client), grads_(grads), keys_(client.all_keys()) {
  const ps::Layout& layout = client_.layout();
  if (params.size() != layout.keys()) {
    throw Error("the model has " + std::to_string(params.size()) +
                " trained parameters and the servers' table " + std::to_string(layout.keys()) +
                " keys");
  }
  const auto servers = static_cast<size_t>(layout.servers());
  shard_params_.assign(servers, 0);
  params_.resize(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    Param& p = params_[i];
    p.tensor = params[i];
    const ps::Range r = layout.key_range(i);
    p.at = r.offset;
    for (size_t s = 0; s < servers; ++s) {
      const ps::Range& shard = layout.shard(static_cast<int>(s));
      if (std::max(r.offset, shard.offset) < std::min(r.end(), shard.end())) {
        p.shards.push_back(s);
        ++shard_params_[s];
      }
    }
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    params_[i].hook = params_[i].tensor.register_hook(
        [this, i](const torch::Tensor& grad) { on_gradient(i, grad); });
  }
}

GradientPusher::~GradientPusher() {
  for (Param& p : params_) p.tensor.remove_hook(p.hook);
  drain();
}

// What a failed step left in flight completes on the client's thread; its errors were the step's.
void GradientPusher::drain() {
  for (Part& part : parts_in_flight_) {
    try {
      part.work->wait();
    } catch (const std::exception& e) {
      spdlog::debug("a push of an abandoned step failed: {}", e.what());
    }
  }
  parts_in_flight_.clear();
}

void GradientPusher::start(const ps::PushPullOptions& push, float scale) {
  drain();
  push_ = push;
  push_.push_to.clear();
  scale_ = scale;
  pending_ = shard_params_;
  pushed_.assign(shard_params_.size(), false);
  for (Param& p : params_) p.ready = false;
  missing_ = params_.size();
  in_step_ = true;
}

void GradientPusher::on_gradient(size_t i, const torch::Tensor& grad) {
  if (!in_step_) return;  // a backward outside a training step: nothing to push
  Param& p = params_[i];
  if (p.ready) {
    throw Error("parameter " + std::to_string(i) +
                " received two gradients in one backward; call backward once per step");
  }
  p.ready = true;
  {
    torch::NoGradGuard no_grad;
    const auto g = (grad.contiguous().reshape(-1) * scale_).contiguous();
    std::memcpy(grads_.data() + p.at, g.data_ptr<float>(),
                static_cast<size_t>(g.numel()) * sizeof(float));
  }
  --missing_;
  bool ready = false;
  for (size_t s : p.shards) ready |= --pending_[s] == 0;
  // The last gradient ends backward: what it completes goes with the pull, in one round trip.
  if (ready && missing_ > 0) push_ready();
}

void GradientPusher::push_ready() {
  ps::PushPullOptions part = push_;
  part.push_to.assign(pending_.size(), false);
  bool any = false;
  for (size_t s = 0; s < pending_.size(); ++s) {
    if (pending_[s] == 0 && shard_params_[s] > 0 && !pushed_[s]) {
      part.push_to[s] = true;
      pushed_[s] = true;
      any = true;
      ++early_parts_;
      ++parts_;
    }
  }
  if (!any) return;
  Part& out = parts_in_flight_.emplace_back();
  out.work = client_.push(keys_, grads_, part, &out.info);
}

std::vector<bool> GradientPusher::finish(ps::PullInfo* info) {
  in_step_ = false;
  for (Param& p : params_) {
    if (!p.ready) std::fill_n(grads_.data() + p.at, p.tensor.numel(), 0.0f);
  }
  std::vector<bool> left(pushed_.size());
  for (size_t s = 0; s < left.size(); ++s) {
    left[s] = !pushed_[s];
    parts_ += left[s] ? 1 : 0;
  }
  ps::PullInfo seen;
  std::exception_ptr failed;
  for (Part& part : parts_in_flight_) {
    try {
      part.work->wait();
      seen.duplicates += part.info.duplicates;
      seen.stopped |= part.info.stopped;
      seen.held += part.info.held;  // the client sends parts one after another
    } catch (...) {
      if (!failed) failed = std::current_exception();
    }
  }
  parts_in_flight_.clear();
  if (failed) std::rethrow_exception(failed);
  if (info) *info = seen;
  return left;
}

}  // namespace cohort::train
