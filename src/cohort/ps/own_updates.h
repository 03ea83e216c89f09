// Read-my-writes for ssp: a worker sees its own pushes at once, before the servers have applied
// them.
//
// In ssp a shard applies clock c only when every worker has pushed it, so the parameters a worker
// pulls right after pushing c often lack c, and up to `staleness` clocks before it: its next
// gradient is computed on parameters that miss its own last steps. With momentum that delay is
// what makes stale training unstable: heavy-ball SGD with momentum 0.9 is stable on a curvature h
// while lr * h < 3.8 without delay, but only while lr * h < 0.1 when every gradient is one step
// late (0.05 at two steps). Ho et al.'s SSP (NIPS'13) therefore lets a worker always read its own
// updates. With the optimizer on the servers a worker's "own update" is not a fixed increment, so
// OwnUpdates predicts it: the worker runs the servers' optimizer (optimizer.h) on its own
// gradients alone, with a state of its own, and adds the steps it predicts for its pushed clocks
// to the parameters it pulls, on each shard for exactly the clocks that shard has not applied
// yet. Where every worker's gradient is the same (a deterministic objective) the prediction is
// the servers' step and the worker trains on the synchronous parameters; otherwise it stands in
// for the missing clocks with this worker's share of the data, as local SGD would, until the
// servers' step replaces it. A clock the shard has applied is never added twice, and with
// staleness 0 nothing is ever missing, so ssp s = 0 stays exactly synchronous SGD. A step is kept
// until every shard holds its clock: at most staleness + 1 of them, each the size of the table.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "cohort/ps/layout.h"
#include "cohort/ps/optimizer.h"

namespace cohort::ps {

class OwnUpdates {
 public:
  OwnUpdates(const OptimizerSettings& settings, Layout layout);

  // The worker pushed `clock`: `pushed_grad` as pushed (scaled for the servers' sum over
  // workers), `to_mean` the factor that makes it the mean gradient over this worker's own batch,
  // `params` the parameters it was computed on, `lr` the clock's learning rate. Records the step
  // the optimizer would take on that gradient alone. Throws Error for sizes other than the
  // layout's.
  void pushed(int64_t clock, std::span<const float> pushed_grad, float to_mean,
              std::span<const float> params, double lr);
  // `params` as pulled, where shard s holds the clocks below versions[s] (negative: not pulled,
  // left alone): adds to each shard the recorded steps of the clocks it lacks, and forgets the
  // steps of clocks every shard holds. Throws Error for sizes other than the layout's.
  void apply(std::span<float> params, std::span<const int64_t> versions);
  // Forgets the recorded steps (a membership change: the next pull starts afresh). The optimizer
  // state is kept: it is this worker's estimate of the servers'.
  void clear() { steps_.clear(); }
  // Clocks recorded and not yet held by every shard.
  size_t pending() const { return steps_.size(); }
  // Steps added so far, one per clock and shard.
  uint64_t added() const { return added_; }

 private:
  struct Step {
    int64_t clock;
    std::vector<float> delta;
  };
  const OptimizerSettings settings_;
  const Layout layout_;
  OptimizerState state_;
  std::deque<Step> steps_;
  uint64_t added_ = 0;
  std::vector<float> grad_, scratch_;
};

}  // namespace cohort::ps
