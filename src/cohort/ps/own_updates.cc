#include "cohort/ps/own_updates.h"

#include <algorithm>
#include <limits>
#include <string>

#include "cohort/base/error.h"

namespace cohort::ps {

OwnUpdates::OwnUpdates(const OptimizerSettings& settings, Layout layout)
    : settings_(settings), layout_(std::move(layout)) {}

void OwnUpdates::pushed(int64_t clock, std::span<const float> pushed_grad, float to_mean,
                        std::span<const float> params, double lr) {
  if (pushed_grad.size() != layout_.total() || params.size() != layout_.total()) {
    throw Error("own updates: " + std::to_string(pushed_grad.size()) + " gradients and " +
                std::to_string(params.size()) + " parameters for a table of " +
                std::to_string(layout_.total()));
  }
  grad_.resize(pushed_grad.size());
  for (size_t i = 0; i < grad_.size(); ++i) grad_[i] = pushed_grad[i] * to_mean;
  scratch_.assign(params.begin(), params.end());
  optimizer_step(settings_, state_, scratch_, grad_, lr);
  Step s{.clock = clock, .delta = std::vector<float>(params.size())};
  for (size_t i = 0; i < params.size(); ++i) s.delta[i] = scratch_[i] - params[i];
  steps_.push_back(std::move(s));
}

void OwnUpdates::apply(std::span<float> params, std::span<const int64_t> versions) {
  if (params.size() != layout_.total() ||
      versions.size() != static_cast<size_t>(layout_.servers())) {
    throw Error("own updates: " + std::to_string(params.size()) + " parameters and " +
                std::to_string(versions.size()) + " shard versions for a table of " +
                std::to_string(layout_.total()) + " on " + std::to_string(layout_.servers()));
  }
  int64_t held_by_all = std::numeric_limits<int64_t>::max();
  for (int s = 0; s < layout_.servers(); ++s) {
    const int64_t v = versions[static_cast<size_t>(s)];
    if (v < 0) continue;
    held_by_all = std::min(held_by_all, v);
    const Range& r = layout_.shard(s);
    for (const Step& step : steps_) {
      if (step.clock < v) continue;
      ++added_;
      for (uint64_t i = r.offset; i < r.end(); ++i) params[i] += step.delta[i];
    }
  }
  if (held_by_all == std::numeric_limits<int64_t>::max()) return;  // no shard pulled
  while (!steps_.empty() && steps_.front().clock < held_by_all) steps_.pop_front();
}

}  // namespace cohort::ps
