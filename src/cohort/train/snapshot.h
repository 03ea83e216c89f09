// In-memory snapshots: the committed state a worker rolls back to when a member is lost, and
// sends to a worker that joins without state (trainer.h, "Fault tolerance").
//
// A snapshot is taken every `elastic.snapshot_every_steps` steps and used only after a failure or
// when a worker joins, so it is a copy of the tensors, not a checkpoint: copying the parameters,
// buffers and optimizer state into buffers kept from the snapshot it displaces costs a memory copy
// (about 0.1 ms a MB), where encoding a checkpoint (libtorch's archive, its CRC-32s, SHA-256)
// cost 3–8 ms a snapshot on the examples' models, 4–8% of the MLP's training time. The bytes of
// a checkpoint are made from a snapshot only when a worker without state needs them.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "cohort/train/checkpoint_format.h"
#include "cohort/train/train_state.h"

namespace cohort::train {

// The model's parameters and buffers, the optimizer's per-parameter state and its groups'
// options, and the CPU generator's state, copied. Optimizers: SGD and Adam (what
// make_optimizer builds); another one's state is refused with an Error.
class StateCopy {
 public:
  // Copies the live state, reusing this copy's buffers where the shapes match.
  void capture(torch::nn::Module& model, torch::optim::Optimizer* optimizer);
  // Puts the copy back: the model's tensors and the optimizer's state are written in place, so
  // every reference to them (optimizer, DDP buckets and hooks) stays valid; a parameter that had
  // no optimizer state when the copy was taken has none afterwards.
  void restore(torch::nn::Module& model, torch::optim::Optimizer* optimizer) const;

 private:
  std::vector<torch::Tensor> tensors_;  // parameters, then buffers, in the model's order
  std::vector<std::unique_ptr<torch::optim::OptimizerOptions>> options_;  // one per group
  // One per parameter of the optimizer's groups, in order; null: no state yet.
  std::vector<std::unique_ptr<torch::optim::OptimizerParamState>> states_;
  torch::Tensor rng_;
};

// A committed state: TrainState, where it is (the metadata a checkpoint of it carries), the
// tensors, and the synchronization mode's state (SyncMode::save_state).
struct Snapshot {
  TrainState state;
  CheckpointMeta meta;
  std::string sync_state;
  std::shared_ptr<StateCopy> copy;
};

// The last two snapshots, the newest last: ranks are at most one commit apart when a collective
// fails, so the newest snapshot every rank holds is one of a rank's last two.
class Snapshots {
 public:
  // The copy that the snapshot of `step` will displace (so that its buffers are reused), or a
  // new one; the caller fills it and passes it to take().
  std::shared_ptr<StateCopy> recycle(int64_t step);
  // A second snapshot of the same step replaces the first.
  void take(Snapshot snap);
  // Only `snap` is kept (after a restore).
  void reset(Snapshot snap);
  // Only the snapshot of `step` is kept (after restoring it); the others are dropped.
  void keep_only(int64_t step);
  const Snapshot* find(int64_t step) const;
  bool empty() const { return list_.empty(); }
  const Snapshot& newest() const { return list_.back(); }

 private:
  std::deque<Snapshot> list_;
};

}  // namespace cohort::train
