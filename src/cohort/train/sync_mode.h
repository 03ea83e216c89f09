// Synchronization modes: what the training loop does with a step's loss (sync.mode in the job
// file, docs/job-config.md).
//
// The loop (trainer.cc) owns the data, the schedule, faults, tracing, evaluation, commits and
// recovery; a mode owns how the replicas' gradients or models meet: backward, whatever exchange
// the mode makes, and the optimizer step. Each mode is one file of its own:
//   allreduce_mode.cc  gradients averaged during backward at every step (DDP); replicas stay
//                      bitwise equal
//   local_sgd_mode.cc  each worker steps on its own gradients; the models are averaged every
//                      sync.period steps (post-local SGD), optionally through an outer optimizer
//   server_mode.cc     ssp and async: parameter servers hold the model; each worker pushes its
//                      gradients and pulls the parameters at its own pace (server_mode.h). The
//                      loop then runs each worker at its own clock (trainer.cc)
//
// A mode is made for one membership epoch (its communicator) and may keep state across epochs
// and checkpoints through save_state()/load_state(). The loop commits (snapshots) only where the
// mode says the replicas agree, so that a snapshot holds the one model every rank has.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cohort/comm/flight_recorder.h"
#include "cohort/train/config.h"

namespace cohort::ddp {
class DistributedDataParallel;
}

namespace cohort::train {

// What the mode needs of the loop for one membership epoch. The references outlive the mode.
struct ModeParts {
  const JobConfig& config;
  torch::nn::Module& model;
  torch::optim::Optimizer& optimizer;
  ddp::DistributedDataParallel& ddp;  // over the epoch's communicator
  // Sets the step's phase in the flight recorder and the timeline.
  std::function<void(comm::Phase)> phase;
};

// How a step's synchronisation went.
struct StepSync {
  double wait_s = 0;      // time blocked on the exchange (DDP's wait, an averaging)
  int64_t synced_us = 0;  // when the gradients (or models) were in (comm::now_us())
  // Time blocked while another worker evaluated the model (parameter servers): neither training
  // nor exchange.
  double held_s = 0;
};

class SyncMode {
 public:
  virtual ~SyncMode() = default;
  // Backward of `loss`, the mode's exchange and the optimizer step of training step `step`
  // (0-based: the step being trained). Every rank calls it for the same steps.
  virtual StepSync step(const torch::Tensor& loss, int64_t step) = 0;
  // Whether every replica now holds the same parameters.
  virtual bool replicas_agree() const = 0;
  // Brings the replicas to agreement if they are not (before an evaluation and a commit that
  // the loop cannot move, e.g. at the end of an epoch). Every rank calls it at the same point.
  virtual void synchronize() = 0;
  // Whether the loop should commit after `completed` steps (besides the ends of epochs and of
  // training): allreduce every elastic.snapshot_every_steps, local SGD at each averaging.
  virtual bool commit_due(int64_t completed) const = 0;
  // The mode's own state for snapshots and checkpoints (replicated: equal on every rank where
  // the replicas agree); empty when it keeps none. load_state("") starts it afresh.
  virtual std::string save_state() const { return {}; }
  virtual void load_state(const std::string& state) { (void)state; }
  // What the mode reports in the worker's summary (e.g. averagings and how far apart the models
  // were); merged into it.
  virtual nlohmann::json summary() const { return nlohmann::json::object(); }
};

std::unique_ptr<SyncMode> make_sync_mode(const ModeParts& parts);

// Each mode's maker, in its own file.
std::unique_ptr<SyncMode> make_allreduce_mode(const ModeParts& parts);
std::unique_ptr<SyncMode> make_local_sgd_mode(const ModeParts& parts);

}  // namespace cohort::train
