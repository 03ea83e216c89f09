// The parts of train() (trainer.h), shared by trainer.cc (the loop) and trainer_start.cc (the
// start of a membership epoch: a fresh start, a resume, a restore). Not a public header.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <optional>

#include "cohort/base/clock.h"
#include "cohort/base/file.h"
#include "cohort/base/log.h"
#include "cohort/ddp/distributed_data_parallel.h"
#include "cohort/trace/step_log.h"
#include "cohort/trace/tracer.h"
#include "cohort/train/checkpoint.h"
#include "cohort/train/dataset.h"
#include "cohort/train/evaluate.h"
#include "cohort/train/faults.h"
#include "cohort/train/models.h"
#include "cohort/train/progress_window.h"
#include "cohort/train/sampler.h"
#include "cohort/train/schedule.h"
#include "cohort/train/server_mode.h"
#include "cohort/train/snapshot.h"
#include "cohort/train/status_reporter.h"
#include "cohort/train/sync_mode.h"
#include "cohort/train/train_state.h"
#include "cohort/train/trainer.h"

namespace cohort::train::detail {

using nlohmann::json;

// Every rank leaves the membership epoch at a commit because a joiner waits to be admitted.
struct MembershipSwitch {};

// Errors after which the survivors meet again at the next membership epoch. Anything else (a bad
// checkpoint, a bug) ends the worker.
bool is_membership_failure(const std::exception& e);

// The transport probe: an allreduce of `mb` MB timed a few times after one warm-up, the fastest
// kept. Every rank of the communicator calls it.
trace::RankHeader probe_transport(comm::Communicator& comm, double mb, comm::Algorithm algorithm,
                                  int job_rank, int64_t clock_offset_us);

// The codec state this rank had when the checkpoint `name` was written, if it holds one for a
// job of this world size (compression that resumes otherwise starts with empty residuals).
void restore_codec_state(ddp::DistributedDataParallel& ddp,
                         const std::vector<std::string>& codec_states, int rank, int world,
                         const std::string& name);

compress::CompressionOptions compression_options(const JobConfig& cfg);

// One worker's training: what it keeps across membership epochs (the model, the optimizer, the
// committed state and its snapshots, the totals of its summary) and the loop of one epoch, in
// parts: start or restore, the steps, commits, checkpoints, evaluation and the summary.
class Trainer {
 public:
  explicit Trainer(TrainerContext& ctx);
  ~Trainer() { recorder_.set_observer(nullptr); }  // before the tracer goes

  // Trains until done; leaves and rejoins membership epochs when the membership changes.
  json run();

 private:
  // What one membership epoch holds: its communicator, DDP over it, the sync mode, the sampler
  // for its world size and the samples trained since the last commit.
  struct Epoch {
    comm::Communicator& comm;
    int rank, world;
    // The data shard this rank trains and how many there are: its communicator rank and size,
    // or (parameter servers) its slot of the job's workers.
    int data_rank, data_world;
    ddp::DistributedDataParallel& ddp;
    SyncMode& mode;
    uint64_t bytes_before, bytes_at_connect;  // comm_bytes_ and the communicator's count at start
    bool report_recovery = false;
    int64_t restored_step = 0, rolled_back = 0;
    std::optional<DistributedSampler> sampler = {};
    std::optional<LrSchedule> schedule = {};
    int64_t total_steps = 0;
    EpochCount pending = {};
    int64_t pending_epoch = 0;
    // sync.balance: this rank's busy time (data and compute) and steps since the last commit,
    // and the shares of the global batch in use (empty: equal).
    double busy_s = 0;
    int64_t busy_steps = 0;
    std::vector<double> shares = {};
    ProgressWindow window = {};
    uint64_t bytes_now() const { return bytes_before + comm.stats().bytes_sent - bytes_at_connect; }
  };

  // One membership epoch, to the end of training (returns the summary) or to a membership change
  // (throws MembershipSwitch or a membership failure).
  json run_epoch();
  void start_tracing();
  // The first epoch of the workers of the start: the initial broadcast, the transport probe and,
  // when resuming, the checkpoint.
  void start_fresh(Epoch& e);
  void resume_from_checkpoint(Epoch& e);
  // A later epoch: agree on the newest snapshot every rank holds and restore it.
  void restore(Epoch& e);
  void plan_epoch(Epoch& e);
  // One step of `batch`, whose data time started at t0.
  void train_step(Epoch& e, const Batch& batch, Clock::time_point t0);
  bool after_step(Epoch& e, bool epoch_end);
  bool commit(Epoch& e, bool may_switch);
  void rebalance(Epoch& e, const std::vector<double>& per_step);
  void save_checkpoint_now(Epoch& e, bool write);
  void recovery_done(Epoch& e);
  json summary(Epoch& e, const Evaluation& ev);
  // Progress record of rank 0 after a step (the periodic record, and at evaluations and ends).
  void report_progress(Epoch& e, bool last, bool epoch_end, bool evaluated);

  // --- trainer_servers.cc: sync.mode ssp and async, each worker at its own clock ---
  // Takes this worker's slot and its clock as the position, pulls the parameters.
  void begin_servers(Epoch& e, bool fresh);
  bool after_server_step(Epoch& e, bool epoch_end);
  // Rank 0 evaluates the newest model on the whole test set while the others wait.
  void evaluate_alone(Epoch& e);
  void save_server_checkpoint(Epoch& e, bool write);
  // Waits for every slot to have trained its steps (throws MembershipSwitch to take part in a
  // membership change meanwhile).
  void finish_servers(Epoch& e);

  void phase(int64_t step, comm::Phase p) {
    recorder_.set_activity(step, p);
    if (tracer_) tracer_->phase(step, p);
  }
  void take_snapshot(int world);
  CheckpointMeta position(int world) const {
    return CheckpointMeta{.step = state_.step,
                          .epoch = state_.epoch,
                          .consumed = state_.consumed,
                          .world_size = world,
                          .seed = cfg_.train.seed,
                          .job = cfg_.name,
                          .time = wall_seconds()};
  }
  double train_seconds() const { return t_train_ ? seconds_since(*t_train_) - eval_s_ : 0.0; }

  TrainerContext& ctx_;
  const JobConfig& cfg_;
  const int job_rank_;
  std::shared_ptr<comm::FlightRecorder> recorder_owner_;
  comm::FlightRecorder& recorder_;
  FaultInjector faults_;
  std::unique_ptr<trace::Tracer> tracer_;
  Dataset train_set_, test_set_;
  ModelPtr model_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  const int64_t max_steps_;
  std::unique_ptr<CheckpointDir> checkpoints_;

  // sync.mode ssp and async: this worker's side of the parameter servers.
  std::unique_ptr<ServerWorker> servers_;
  TrainState state_;
  Snapshots snapshots_;
  double snapshot_s_ = 0;     // time spent taking in-memory snapshots
  SyncMode* mode_ = nullptr;  // the current epoch's (sync_mode.h); null between epochs
  elastic::Membership membership_;
  bool have_state_ = false;
  int64_t resumed_from_ = 0;
  bool resumed_model_ = false;  // this process read the checkpoint it resumes into the model
  int restores_ = 0;

  double compute_s_ = 0, data_s_ = 0, comm_s_ = 0, last_loss_ = 0;
  uint64_t comm_bytes_ = 0;
  // Gradient exchange only, summed over membership epochs (see DdpStats).
  uint64_t grad_sent_ = 0, grad_received_ = 0, grad_uncompressed_ = 0;
  int64_t samples_ = 0;
  StatusReporter status_;
  // Where each step went, for stragglers and `cohort diagnose` (trace/step_log.h).
  std::unique_ptr<trace::StepLog> step_log_;
  int64_t clock_offset_us_ = 0;
  std::optional<trace::RankHeader> probe_;  // the transport probe (the header of the step log)
  // Training time starts at this process's first step, as PyTorch's does after its barrier:
  // rendezvous, the initial broadcast, the transport probe and a restore are not in it.
  std::optional<Clock::time_point> t_train_;
  double train_s_ = 0;
  // Periodic evaluation (train.eval_every_steps): its time is not training time. The newest
  // result is kept so that a job stopped by train.stop_at_accuracy does not evaluate the same
  // model twice.
  double eval_s_ = 0;
  bool reached_ = false;
  std::optional<std::pair<int64_t, Evaluation>> newest_eval_;
};

}  // namespace cohort::train::detail
