// The loop's parts for sync.mode ssp and async (server_mode.h): every worker at its own clock.
// Nothing is committed with collectives and nothing rolled back: the parameter servers hold the
// model and every slot's clock, and count the samples each push trained.
#include <torch/torch.h>

#include "cohort/base/log.h"
#include "cohort/train/trainer_impl.h"

namespace cohort::train::detail {

void Trainer::begin_servers(Epoch& e, bool fresh) {
  if (step_log_ && !probe_) {
    probe_ = trace::RankHeader{.rank = job_rank_, .world = e.world};
    step_log_->header(*probe_);
  }
  // The lowest rank offers its model to servers that have none: the seed's, or the checkpoint's
  // in a resumed job (not before this process read it: a seed's model would start it over).
  const Place place = servers_->begin(*model_, membership_,
                                      e.rank == 0 && (ctx_.resume_from.empty() || resumed_model_));
  e.data_rank = place.slot;
  e.data_world = place.slots;
  // The slot's clock is its position: whole epochs of the slot's steps, then steps into one.
  DistributedSampler sampler({.dataset_size = train_set_.size(),
                              .world_size = place.slots,
                              .rank = place.slot,
                              .batch_size = cfg_.train.batch_size,
                              .seed = cfg_.train.seed,
                              .drop_last = cfg_.train.drop_last});
  const int64_t per_epoch = std::max<int64_t>(1, sampler.steps_per_epoch());
  state_.step = place.clock;
  state_.epoch = place.clock / per_epoch;
  state_.consumed = state_.epoch < cfg_.train.epochs
                        ? (place.clock % per_epoch) * cfg_.train.batch_size * place.slots
                        : 0;
  if (!fresh) {
    e.restored_step = state_.step;
    e.report_recovery = e.rank == 0;
    ++restores_;
  }
}

bool Trainer::after_server_step(Epoch& e, bool epoch_end) {
  const bool evaluate_now = e.rank == 0 && cfg_.train.eval_every_steps > 0 &&
                            state_.step % cfg_.train.eval_every_steps == 0;
  if (evaluate_now) evaluate_alone(e);
  if (servers_->stopped()) reached_ = true;
  const bool last = state_.step >= e.total_steps || state_.epoch >= cfg_.train.epochs || reached_;
  report_progress(e, last, epoch_end, evaluate_now);
  if (e.rank == 0 && cfg_.checkpoint.every_steps > 0 &&
      state_.step % cfg_.checkpoint.every_steps == 0) {
    save_server_checkpoint(e, /*write=*/true);
  }
  // Nothing to commit: a worker takes part in a membership change at once.
  return ctx_.agent.change_requested();
}

void Trainer::evaluate_alone(Epoch& e) {
  phase(state_.step, comm::Phase::Evaluate);
  const auto t = Clock::now();
  servers_->hold_others();
  try {
    servers_->pull_latest(*model_);
    const Evaluation ev = evaluate(*model_, test_set_);
    newest_eval_.emplace(state_.step, ev);
    reached_ = cfg_.train.stop_at_accuracy > 0 && ev.accuracy >= cfg_.train.stop_at_accuracy;
    if (reached_) servers_->request_stop();
  } catch (...) {
    // The others must not stay held while this worker rejoins (or fails): let them go, on a
    // best-effort basis (a server whose connection broke ends the pause itself).
    try {
      servers_->release_others();
    } catch (const std::exception& e) {
      spdlog::warn("releasing the other workers after a failed evaluation: {}", e.what());
    }
    throw;
  }
  servers_->release_others();
  const auto spent = Clock::now() - t;
  eval_s_ += std::chrono::duration<double>(spent).count();
  e.window.exclude(spent);
}

// Rank 0's: the newest parameters and the servers' whole state (their optimizer's included), so
// that a resumed job goes on where every slot was.
void Trainer::save_server_checkpoint(Epoch& e, bool write) {
  if (e.rank != 0 || !write || !checkpoints_) return;
  phase(state_.step, comm::Phase::Checkpoint);
  const auto t = Clock::now();
  servers_->pull_latest(*model_);
  auto path = checkpoints_->save(position(e.data_world), *model_, optimizer_.get(),
                                 {.sync_state = e.mode.save_state(),
                                  .sync_mode = std::string(sync_kind_name(cfg_.sync.mode)),
                                  .train_state = state_.to_json().dump()});
  spdlog::info("checkpoint {} written in {:.2f} s", path.string(), seconds_since(t));
}

void Trainer::finish_servers(Epoch& e) {
  status_.maybe_report("finishing", state_.step, e.total_steps, state_.epoch, e.bytes_now(), true);
  phase(state_.step, comm::Phase::Exchange);
  servers_->finish(*model_, e.total_steps);
}

}  // namespace cohort::train::detail
