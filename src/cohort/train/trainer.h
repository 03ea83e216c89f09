// The training loop of one rank: data-parallel SGD/Adam over DistributedDataParallel.
//
// Each step: this rank's batch from the DistributedSampler -> forward -> loss -> what the job's
// synchronization mode does with it (sync_mode.h: in allreduce mode, backward with gradient
// buckets allreduced while backward runs, then the optimizer step; in local SGD, a local step
// and, every period, an average of the models). The loss is the sum over this
// rank's samples divided by the global batch and multiplied by the world size, so that DDP's
// average over ranks is exactly the mean over the global batch, even for the smaller last batch of
// an epoch. Rank 0 reports progress every log_every_steps and writes checkpoints every
// checkpoint.every_steps (and at the end); at the end every rank evaluates its share of the test
// set and the counts are summed across ranks.
//
// Fault tolerance. Where the mode says (every elastic.snapshot_every_steps steps in allreduce mode,
// at every average in local SGD), at the end of every epoch and at the end of training, the
// ranks commit: one small allreduce adds up the samples each rank trained on
// since the last commit (count, sum and sum of squares of their indices, per epoch) and says
// whether any rank saw the coordinator ask for a new membership epoch; then every rank keeps an
// in-memory snapshot of the state (model, optimizer, generator, sampler position, sample counts).
// Data parallelism replicates that state, so every rank's snapshot is also a copy of every other
// rank's: losing any one worker loses no committed state. The last two snapshots are kept, because
// ranks are at most one commit apart when a collective fails.
//
// When the membership changes (a collective failed, the coordinator aborted the communicator, or a
// joiner was admitted at a commit), the rank leaves the epoch, meets the others at the next one
// (elastic::WorkerAgent), and there the ranks agree on the newest snapshot they all hold, restore
// it (ranks without state - joiners - receive it, encoded as a checkpoint's bytes, from the lowest
// rank that has it), rebuild the sampler for the new world size from the snapshot's (epoch,
// consumed) position, and go on. Samples trained after the snapshot are rolled back with it, so
// each sample of an epoch is trained on exactly once in the final model; the summary's
// epoch_samples counts them.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "cohort/elastic/agent.h"
#include "cohort/train/config.h"

namespace cohort::train {

struct TrainerContext {
  const JobConfig& config;
  elastic::WorkerAgent& agent;  // membership, heartbeats and each epoch's communicator
  std::string run_dir;          // checkpoints go to <run_dir>/checkpoints; empty: none
  std::string resume_from;  // a checkpoint directory to resume from (newest valid); empty: fresh
  // Rank 0's progress records (see train() for the fields). May be empty.
  std::function<void(const nlohmann::json&)> report_progress;
  // Events for the run's events.jsonl (an object with "event"), e.g. the checkpoint resumed from.
  // May be empty.
  std::function<void(const nlohmann::json&)> report_event;
  // Every rank's live status, about twice a second and when its state changes (see train()).
  // May be empty.
  std::function<void(const nlohmann::json&)> report_status;
  // The worker's flight recorder (the trainer sets its step and phase); null: one of its own.
  std::shared_ptr<comm::FlightRecorder> recorder;
  // The job's store and token (what the worker joined with): sync.mode ssp and async find the
  // parameter servers there.
  std::string store;
  std::string token;
};

// Trains and evaluates; returns this rank's summary:
//   rank, steps, epochs, samples, train_seconds, compute_seconds, comm_seconds, data_seconds,
//   comm_bytes, test_accuracy, test_loss, final_loss, parameter_digest, resumed_from_step,
//   job_rank, membership_epoch, restores, snapshot_seconds, epoch_samples ([{epoch, samples,
//   id_sum, id_sq_sum}])
// Progress records: step, total_steps, epoch, epochs, loss, accuracy (rank 0's batches), lr,
//   samples_per_sec, steps_per_sec, time.
// Status records: state ("training", "evaluating"), step, total_steps, epoch, step_time and
//   comm_share (mean step time, and the share of it blocked on gradient exchange, since the last
//   record), samples_per_sec (this rank's), bytes_sent, comm_wait_hist (LatencyHistogram of each
//   step's gradient-exchange wait: counts per bucket and sum).
nlohmann::json train(TrainerContext& ctx);

}  // namespace cohort::train
