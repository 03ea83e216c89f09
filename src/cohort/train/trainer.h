// The training loop of one rank: data-parallel SGD/Adam over DistributedDataParallel.
//
// Each step: this rank's batch from the DistributedSampler -> forward -> loss -> backward with
// gradient buckets allreduced while backward runs -> optimizer step. The loss is the sum over this
// rank's samples divided by the global batch and multiplied by the world size, so that DDP's
// average over ranks is exactly the mean over the global batch, even for the smaller last batch of
// an epoch. Rank 0 reports progress every log_every_steps and writes checkpoints every
// checkpoint.every_steps (and at the end); at the end every rank evaluates its share of the test set
// and the counts are summed across ranks.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "cohort/comm/communicator.h"
#include "cohort/train/config.h"

namespace cohort::train {

struct TrainerContext {
  const JobConfig& config;
  comm::Communicator& comm;
  std::string run_dir;      // checkpoints go to <run_dir>/checkpoints; empty: none
  std::string resume_from;  // a checkpoint directory to resume from (newest valid); empty: fresh
  // Rank 0's progress records (see train() for the fields). May be empty.
  std::function<void(const nlohmann::json&)> report_progress;
};

// Trains and evaluates; returns this rank's summary:
//   rank, steps, epochs, samples, train_seconds, compute_seconds, comm_seconds, data_seconds,
//   comm_bytes, test_accuracy, test_loss, final_loss, parameter_digest, resumed_from_step
// Progress records: step, total_steps, epoch, epochs, loss, lr, samples_per_sec, steps_per_sec,
//   time.
nlohmann::json train(TrainerContext& ctx);

}  // namespace cohort::train
