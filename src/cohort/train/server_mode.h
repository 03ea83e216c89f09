// sync.mode ssp and async: the model lives on the job's parameter servers (ps/), which apply the
// optimizer; each worker pushes its gradients and pulls the parameters back, at its own pace.
//
// A worker trains a slot: one of the job's `workers` data shards, with its own clock (the steps
// it has pushed). The servers count every slot's clock; in ssp a worker at clock c pulls
// parameters that hold at least clocks 0 .. c - staleness - 1 of every slot, so no worker gets
// more than `staleness` steps ahead of the slowest, while in async nothing waits. Each step's
// push and pull are one round trip per server (push_pull). The samples a step trained ride with
// its push, so the servers' counts prove that every sample of an epoch was trained once, failures
// included.
//
// Unlike the lockstep modes nothing is rolled back when a worker is lost: the others go on (in
// ssp until they are `staleness` steps ahead of the lost slot), and a replacement takes over the
// lost worker's slot at its last acknowledged clock. Evaluation and checkpoints are the lowest
// rank's: it pauses the others (they wait, their pause not counted as their training time),
// pulls the newest parameters, evaluates on the whole test set, asks every worker to stop when
// train.stop_at_accuracy is reached, and resumes them. The end waits until every slot has
// trained all its steps; then every worker pulls the final model.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cohort/base/clock.h"
#include "cohort/elastic/agent.h"
#include "cohort/train/sync_mode.h"
#include "cohort/train/train_state.h"

namespace cohort::ps {
class Client;
class OwnUpdates;
struct PushPullOptions;
struct PullInfo;
}  // namespace cohort::ps

namespace cohort::train {

// Where a worker stands: the data shard it trains (its slot, of `slots`) and its clock.
struct Place {
  int slot = 0;
  int slots = 1;
  int64_t clock = 0;
};

// One worker's side of the parameter servers, kept across membership epochs.
//
// Every wait on the servers (a pull held back by the staleness bound, the end, an evaluation's
// pause) looks at `asked_to_leave` a few times a second and throws LeaveRequested when it says so:
// a worker blocked on a slot whose worker is gone must still take part in the membership change
// that brings its replacement.
class ServerWorker {
 public:
  struct LeaveRequested {};
  // `store`: the job's store (what the worker joined), `token` the job token.
  ServerWorker(const JobConfig& config, std::string store, std::string token, int job_rank,
               std::function<bool()> asked_to_leave);
  ~ServerWorker();

  // The start of a membership epoch: this worker's slot (its own; a replacement takes a lost
  // worker's), the servers' parameters set when they have none, and the parameters pulled into
  // `model`. A checkpoint's state (load_state) is restored; else the lowest rank of the epoch
  // (`lead`, false in a resumed job) offers `model` while it is still the seed's, never pulled:
  // the first init of a shard wins, so this is what sets them at the start, and after a start
  // that failed before any worker set them (nobody pulled then), and a duplicate otherwise.
  Place begin(torch::nn::Module& model, const elastic::Membership& m, bool lead);
  // The samples of the step about to be pushed (of data epoch `epoch`).
  void set_samples(int64_t epoch, const EpochCount& c) {
    samples_epoch_ = epoch;
    samples_ = c;
  }
  // Backward is done: pushes the gradients (scaled by 1 / slots) for `clock` and pulls the
  // parameters into `model`. Returns the time blocked, of which `held` was spent while another
  // worker evaluated.
  struct Exchange {
    double wait_s = 0;
    double held_s = 0;
  };
  Exchange exchange(torch::nn::Module& model, int64_t clock, double lr);
  // Evaluation by the lowest rank: the others wait meanwhile (their answers are held).
  void hold_others();
  void release_others();
  // The newest parameters into `model`.
  void pull_latest(torch::nn::Module& model);
  void request_stop();
  // Whether some worker asked every worker to stop (its evaluation reached the target).
  bool stopped() const { return stopped_; }
  // The end: blocks until every slot that is not retired has trained `total` clocks (or the job
  // was stopped), then pulls the final parameters.
  void finish(torch::nn::Module& model, int64_t total);
  // The servers' whole state (checkpoints) and its restore (a resumed job).
  std::string save_state();
  void load_state(const std::string& state);
  // Staleness measured at every step, pushes, and the servers' sample counts.
  nlohmann::json summary();
  // The staleness of the parameters the next step uses (-1 before the first pull).
  int64_t staleness() const { return staleness_; }
  // A step trains on them: their staleness, counted in the summary's (the steps trained, as the
  // step log has them, not the pulls: the last one and those after a stop train nothing).
  int64_t count_staleness();

 private:
  void connect(torch::nn::Module& model, uint32_t slot);
  int claim_slot(const elastic::Membership& m);
  // Pulls into params_ until `o` is reached (in slices of kWaitSlice, asking to leave between
  // them); the held time and the info of the last pull.
  double pull_until(const ps::PushPullOptions& o, ps::PullInfo& info);
  void pull_into(torch::nn::Module& model, int64_t clock);
  // params_ as pulled (`info`'s shard versions), plus this worker's own steps the shards lack
  // (sync.read_my_writes), into `model`.
  void view_into(torch::nn::Module& model, const ps::PullInfo& info);
  void copy_into(torch::nn::Module& model);
  void record_staleness(int64_t clock, int64_t min_clock);

  const JobConfig& cfg_;
  const std::string store_address_;
  const std::string token_;
  const int job_rank_;
  const std::function<bool()> asked_to_leave_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<ps::Client> client_;
  std::vector<uint64_t> keys_;
  std::vector<float> grads_, params_;
  std::unique_ptr<ps::OwnUpdates> own_;  // ssp with sync.read_my_writes
  int slot_ = -1;
  int64_t clock_ = 0;
  int64_t samples_epoch_ = 0;
  EpochCount samples_;
  bool stopped_ = false;
  bool pulled_ = false;  // the model was overwritten from the servers: no longer the seed's
  int64_t staleness_ = -1;
  std::vector<uint64_t> staleness_hist_;
  int64_t staleness_max_ = 0, staleness_counted_ = 0;
  double staleness_sum_ = 0;
  int64_t pushes_ = 0, duplicates_ = 0;
  // The start of the last exchange, what of it was held, and the step time's running mean.
  std::optional<Clock::time_point> last_exchange_;
  double last_held_s_ = 0;
  double step_s_ = 0;
  std::string pending_restore_;  // a checkpoint's server state, restored at begin()
};

// The SyncMode of one membership epoch: backward, then the exchange with the servers.
std::unique_ptr<SyncMode> make_server_mode(const ModeParts& parts, ServerWorker& worker);

}  // namespace cohort::train
