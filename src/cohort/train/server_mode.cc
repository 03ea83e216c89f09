#include "cohort/train/server_mode.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "cohort/base/bytes.h"
#include "cohort/base/clock.h"
#include "cohort/base/error.h"
#include "cohort/base/log.h"
#include "cohort/ddp/distributed_data_parallel.h"
#include "cohort/ps/client.h"
#include "cohort/ps/own_updates.h"
#include "cohort/ps/view.h"
#include "cohort/store/connect.h"
#include "cohort/train/models.h"
#include "cohort/train/server_settings.h"

namespace cohort::train {
namespace {

// Staleness beyond this many clocks is counted in the histogram's last bucket.
constexpr size_t kStalenessBuckets = 64;
// How long a wait on the servers lasts before the worker looks whether it must leave its
// membership epoch (well under elastic.failure_timeout_s, within which it must report ready).
constexpr std::chrono::milliseconds kWaitSlice{200};

std::vector<torch::Tensor> trained(torch::nn::Module& model) {
  std::vector<torch::Tensor> out;
  for (auto& p : model.parameters()) {
    if (p.requires_grad()) out.push_back(p);
  }
  return out;
}

std::chrono::milliseconds ms(double s) {
  return std::chrono::milliseconds(static_cast<long>(s * 1000));
}

}  // namespace

ServerWorker::ServerWorker(const JobConfig& config, std::string store, std::string token,
                           int job_rank, std::function<bool()> asked_to_leave)
    : cfg_(config),
      store_address_(std::move(store)),
      token_(std::move(token)),
      job_rank_(job_rank),
      asked_to_leave_(std::move(asked_to_leave)),
      store_(store::connect(store_address_,
                            {.token = token_, .timeout = ms(config.comm.timeout_s)})) {}

ServerWorker::~ServerWorker() = default;

// A worker of the start trains its own rank's slot. A replacement takes the slot of a worker that
// is not in the membership any more (the one it replaces; it may have died before it claimed
// it), claimed with compare_set so that two replacements never take the same one.
int ServerWorker::claim_slot(const elastic::Membership& m) {
  if (job_rank_ < cfg_.workers) {
    const std::string key = ps::keys::slot(job_rank_);
    const store::Bytes mine = store::to_bytes(std::to_string(job_rank_));
    const store::Bytes was = store_->compare_set(key, {}, mine);
    if (was != mine) store_->set(key, mine);  // a rank started again by a cluster's launcher
    return job_rank_;
  }
  for (int s = 0; s < cfg_.workers; ++s) {
    const ps::SlotOwner owner = ps::slot_owner(*store_, s);
    if (std::find(m.members.begin(), m.members.end(), owner.rank) != m.members.end()) continue;
    const store::Bytes mine = store::to_bytes(std::to_string(job_rank_));
    if (store_->compare_set(ps::keys::slot(s), owner.record, mine) == mine) return s;
  }
  throw Error("rank " + std::to_string(job_rank_) +
              " joined as a replacement, but every worker slot has a worker");
}

void ServerWorker::connect(torch::nn::Module& model, uint32_t slot) {
  std::vector<uint64_t> sizes;
  for (const auto& p : trained(model)) {
    if (p.scalar_type() != torch::kFloat32) {
      throw ConfigError("parameter servers hold f32 parameters; the model has a " +
                        std::string(c10::toString(p.scalar_type())) + " one");
    }
    sizes.push_back(static_cast<uint64_t>(p.numel()));
  }
  ps::Layout layout(std::move(sizes), static_cast<int>(cfg_.parameter_servers));
  client_ =
      std::make_unique<ps::Client>(ps::ClientOptions{.store = store_address_,
                                                     .token = token_,
                                                     .name = "rank " + std::to_string(job_rank_),
                                                     .slot = slot,
                                                     .timeout = ms(cfg_.comm.timeout_s)},
                                   layout);
  keys_ = client_->all_keys();
  grads_.assign(layout.total(), 0.0f);
  params_.assign(layout.total(), 0.0f);
  if (cfg_.sync.mode == SyncKind::Ssp && cfg_.sync.read_my_writes && cfg_.sync.staleness > 0) {
    own_ = std::make_unique<ps::OwnUpdates>(server_optimizer(cfg_), client_->layout());
  }
}

Place ServerWorker::begin(torch::nn::Module& model, const elastic::Membership& m, bool lead) {
  last_exchange_.reset();  // a membership change is not a step
  if (slot_ < 0) {
    slot_ = claim_slot(m);
    connect(model, static_cast<uint32_t>(slot_));
  }
  if (!pending_restore_.empty()) {
    ByteReader r(reinterpret_cast<const uint8_t*>(pending_restore_.data()),
                 pending_restore_.size());
    std::vector<std::vector<uint8_t>> states(r.get<uint32_t>());
    for (auto& st : states) {
      const auto n = r.get<uint64_t>();
      const uint8_t* p = r.get_bytes(n);
      st.assign(p, p + n);
    }
    client_->restore(std::move(states))->wait();
    pending_restore_.clear();
  } else if (lead && !pulled_) {
    // Every worker built the same model from the seed; the first init wins.
    torch::NoGradGuard no_grad;
    size_t at = 0;
    for (const auto& p : trained(model)) {
      auto flat = p.detach().contiguous().reshape(-1);
      std::memcpy(params_.data() + at, flat.data_ptr<float>(), flat.numel() * sizeof(float));
      at += static_cast<size_t>(flat.numel());
    }
    client_->init(params_)->wait();
  }
  // Where this slot stands: the first clock some server has not taken from it yet.
  clock_ = INT64_MAX;
  for (const ps::ShardStatus& s : client_->status()) {
    clock_ = std::min(clock_, s.slot_clocks.at(static_cast<size_t>(slot_)));
    stopped_ |= s.stopped;
  }
  if (clock_ < 0) throw Error("worker slot " + std::to_string(slot_) + " was retired");
  pull_into(model, clock_);
  spdlog::info("training worker slot {} of {} from clock {}", slot_, cfg_.workers, clock_);
  return {.slot = slot_, .slots = static_cast<int>(cfg_.workers), .clock = clock_};
}

double ServerWorker::pull_until(const ps::PushPullOptions& o, ps::PullInfo& info) {
  double held = 0;
  for (;;) {
    ps::PushPullOptions slice = o;
    slice.wait = kWaitSlice;
    client_->pull(keys_, params_, slice, &info)->wait();
    held += std::chrono::duration<double>(info.held).count();
    stopped_ |= info.stopped;
    if (info.reached || stopped_) return held;
    if (asked_to_leave_()) throw LeaveRequested{};
  }
}

void ServerWorker::copy_into(torch::nn::Module& model) {
  pulled_ = true;
  torch::NoGradGuard no_grad;
  size_t at = 0;
  for (auto& p : trained(model)) {
    p.copy_(torch::from_blob(const_cast<float*>(params_.data()) + at, p.sizes(), torch::kFloat32));
    at += static_cast<size_t>(p.numel());
  }
}

void ServerWorker::pull_into(torch::nn::Module& model, int64_t clock) {
  const int64_t min_version =
      cfg_.sync.mode == SyncKind::Ssp ? std::max<int64_t>(0, clock - cfg_.sync.staleness) : 0;
  ps::PullInfo info;
  pull_until({.min_version = min_version}, info);
  record_staleness(clock, info.min_clock);
  if (own_) own_->clear();
  copy_into(model);
}

void ServerWorker::view_into(torch::nn::Module& model, const ps::PullInfo& info) {
  if (own_) own_->apply(params_, info.versions);
  copy_into(model);
}

ServerWorker::Exchange ServerWorker::exchange(torch::nn::Module& model, int64_t clock, double lr) {
  const auto params = trained(model);
  {
    torch::NoGradGuard no_grad;
    // The loss is scaled for an average over `slots` workers (trainer.h): the servers sum.
    const float scale = 1.0f / static_cast<float>(cfg_.workers);
    size_t at = 0;
    for (const auto& p : params) {
      const int64_t n = p.numel();
      if (p.grad().defined()) {
        auto g = (p.grad().contiguous().reshape(-1) * scale).contiguous();
        std::memcpy(grads_.data() + at, g.data_ptr<float>(), static_cast<size_t>(n) * 4);
      } else {
        std::fill_n(grads_.data() + at, n, 0.0f);
      }
      at += static_cast<size_t>(n);
    }
  }
  // params_ still holds what the model computed this step's gradients on.
  if (own_) own_->pushed(clock, grads_, static_cast<float>(cfg_.workers), params_, lr);
  const int64_t next = clock + 1;
  const bool ssp = cfg_.sync.mode == SyncKind::Ssp;
  const int64_t min_version = ssp ? std::max<int64_t>(0, next - cfg_.sync.staleness) : 0;
  ps::PullInfo info;
  const auto t = Clock::now();
  // This worker's step time (from one exchange to the next, minus what it was held), of which
  // sync.fresh_wait is how long the servers may hold the answer for this clock to complete.
  if (last_exchange_) {
    const double step = std::chrono::duration<double>(t - *last_exchange_).count() - last_held_s_;
    step_s_ = step_s_ > 0 ? 0.8 * step_s_ + 0.2 * step : step;
  }
  last_exchange_ = t;
  const auto fresh =
      ssp ? std::min(kWaitSlice, ms(cfg_.sync.fresh_wait * step_s_)) : std::chrono::milliseconds(0);
  client_
      ->push_pull(keys_, grads_, params_,
                  {.clock = clock,
                   .lr = lr,
                   .min_version = min_version,
                   .wait = kWaitSlice,
                   .fresh = fresh,
                   .counts = {.epoch = samples_epoch_,
                              .samples = samples_.samples,
                              .id_sum = samples_.id_sum,
                              .id_sq_sum = samples_.id_sq_sum}},
                  &info)
      ->wait();
  clock_ = next;
  ++pushes_;
  duplicates_ += info.duplicates > 0 ? 1 : 0;
  stopped_ |= info.stopped;
  double held = std::chrono::duration<double>(info.held).count();
  // The push is in; the parameters of the next step may still be further than the staleness
  // bound allows (ssp): wait for them, leaving if the membership changes meanwhile.
  if (!info.reached && !stopped_) {
    if (asked_to_leave_()) throw LeaveRequested{};
    held += pull_until({.min_version = min_version}, info);
  }
  const double waited = seconds_since(t);
  record_staleness(next, info.min_clock);
  view_into(model, info);
  last_held_s_ = std::min(held, waited);
  return {.wait_s = waited, .held_s = last_held_s_};
}

void ServerWorker::record_staleness(int64_t clock, int64_t min_clock) {
  staleness_ = std::max<int64_t>(0, clock - min_clock);
}

int64_t ServerWorker::count_staleness() {
  if (staleness_ < 0) return staleness_;
  ++staleness_counted_;
  const size_t bucket = std::min(static_cast<size_t>(staleness_), kStalenessBuckets - 1);
  if (staleness_hist_.size() <= bucket) staleness_hist_.resize(bucket + 1, 0);
  ++staleness_hist_[bucket];
  staleness_max_ = std::max(staleness_max_, staleness_);
  staleness_sum_ += static_cast<double>(staleness_);
  return staleness_;
}

void ServerWorker::hold_others() {
  client_->pause(static_cast<uint32_t>(slot_), ms(cfg_.elastic.failure_timeout_s / 2))->wait();
}

void ServerWorker::release_others() {
  client_->resume(static_cast<uint32_t>(slot_))->wait();
}

void ServerWorker::pull_latest(torch::nn::Module& model) {
  ps::PullInfo info;
  client_->pull(keys_, params_, {}, &info)->wait();
  stopped_ |= info.stopped;
  record_staleness(clock_, info.min_clock);  // the next step trains on these
  copy_into(model);
}

void ServerWorker::request_stop() {
  client_->control(ps::Control::kStop)->wait();
  stopped_ = true;
}

void ServerWorker::finish(torch::nn::Module& model, int64_t total) {
  ps::PullInfo info;
  pull_until({.min_clock = total}, info);
  pull_latest(model);
}

std::string ServerWorker::save_state() {
  ByteWriter w;
  const auto states = client_->snapshot();
  w.put<uint32_t>(static_cast<uint32_t>(states.size()));
  for (const auto& st : states) {
    w.put<uint64_t>(st.size());
    w.put_bytes(st.data(), st.size());
  }
  const auto& b = w.bytes();
  return {b.begin(), b.end()};
}

void ServerWorker::load_state(const std::string& state) {
  pending_restore_ = state;
}

nlohmann::json ServerWorker::summary() {
  nlohmann::json samples = nlohmann::json::array();
  const auto status = client_->status();
  if (!status.empty()) {
    for (const ps::SampleCounts& c : status[0].counts) {
      samples.push_back({{"epoch", c.epoch},
                         {"samples", c.samples},
                         {"id_sum", c.id_sum},
                         {"id_sq_sum", c.id_sq_sum}});
    }
  }
  std::vector<uint64_t> applied;
  for (const ps::ShardStatus& s : status) applied.push_back(s.applied);
  return {
      {"slot", slot_},
      {"pushes", pushes_},
      {"pushes_resent", duplicates_},
      // sync.read_my_writes: own steps added to pulled parameters, one per clock and shard.
      {"own_steps_added", own_ ? own_->added() : 0},
      // Pushes each shard applied, every worker's together (each counted once).
      {"pushes_applied_by_shard", applied},
      {"staleness",
       {{"histogram", staleness_hist_},
        {"max", staleness_max_},
        {"mean",
         staleness_counted_ > 0 ? staleness_sum_ / static_cast<double>(staleness_counted_) : 0.0}}},
      // The servers count every sample once, whoever trained it.
      {"epoch_samples", samples}};
}

namespace {

class ServerMode final : public SyncMode {
 public:
  ServerMode(const ModeParts& parts, ServerWorker& worker) : p_(parts), w_(worker) {}

  StepSync step(const torch::Tensor& loss, int64_t step) override {
    p_.phase(comm::Phase::Backward);
    loss.backward();
    p_.phase(comm::Phase::Exchange);
    const ServerWorker::Exchange x = w_.exchange(p_.model, step, learning_rate(p_.optimizer));
    held_s_ += x.held_s;
    agree_ = false;
    return {.wait_s = x.wait_s - x.held_s, .synced_us = comm::now_us(), .held_s = x.held_s};
  }
  bool replicas_agree() const override { return agree_; }
  // The end of training (trainer.cc waits for every slot first): every replica holds the final
  // parameters; their buffers (BatchNorm's statistics) are averaged.
  void synchronize() override {
    if (agree_) return;
    p_.ddp.average_parameters();
    agree_ = true;
  }
  bool commit_due(int64_t) const override { return false; }
  std::string save_state() const override { return w_.save_state(); }
  void load_state(const std::string& state) override {
    if (!state.empty()) w_.load_state(state);
  }
  nlohmann::json summary() const override {
    nlohmann::json s = w_.summary();
    s["held_seconds"] = held_s_;
    return s;
  }
  // Time this worker's exchanges waited while another evaluated (not training time).
  double held_seconds() const { return held_s_; }

 private:
  ModeParts p_;
  ServerWorker& w_;
  bool agree_ = true;
  double held_s_ = 0;
};

}  // namespace

std::unique_ptr<SyncMode> make_server_mode(const ModeParts& parts, ServerWorker& worker) {
  return std::make_unique<ServerMode>(parts, worker);
}

}  // namespace cohort::train
