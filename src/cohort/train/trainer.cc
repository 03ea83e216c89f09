#include "cohort/train/trainer.h"

#include <torch/torch.h>

#include <thread>

#include "cohort/compress/blas_threads.h"
#include "cohort/train/trainer_impl.h"

namespace cohort::train::detail {
namespace {

Dataset load_logged(const JobConfig& cfg, Split split) {
  auto t = Clock::now();
  Dataset d = load_dataset(cfg.data, split, cfg.train.seed);
  spdlog::info("loaded {} {} examples in {:.1f} s", d.size(),
               split == Split::Train ? "training" : "test", seconds_since(t));
  return d;
}

}  // namespace

Trainer::Trainer(TrainerContext& ctx)
    : ctx_(ctx),
      cfg_(ctx.config),
      job_rank_(ctx.agent.rank()),
      recorder_owner_(ctx.recorder ? ctx.recorder
                                   : std::make_shared<comm::FlightRecorder>(job_rank_)),
      recorder_(*recorder_owner_),
      faults_(cfg_.faults, job_rank_, cfg_.workers, cfg_.train.seed),
      train_set_(load_logged(cfg_, Split::Train)),
      test_set_(load_logged(cfg_, Split::Test)),
      model_(make_model(cfg_.model, input_spec(cfg_.data), cfg_.train.seed)),
      optimizer_(make_optimizer(cfg_.train.optimizer, model_->parameters())),
      max_steps_(cfg_.train.max_steps > 0 ? cfg_.train.max_steps
                                          : std::numeric_limits<int64_t>::max()),
      status_(ctx.report_status, recorder_, static_cast<size_t>(cfg_.debug.straggler_window)) {
  if (cfg_.sync.uses_servers()) {
    servers_ = std::make_unique<ServerWorker>(cfg_, ctx_.store, ctx_.token, job_rank_,
                                              [this] { return ctx_.agent.change_requested(); });
  }
  if (!ctx_.run_dir.empty()) {
    const std::filesystem::path dir(ctx_.run_dir);
    checkpoints_ = std::make_unique<CheckpointDir>(dir / "checkpoints", cfg_.checkpoint.keep);
    step_log_ = std::make_unique<trace::StepLog>(
        (dir / "steps" / ("rank-" + std::to_string(job_rank_) + ".jsonl")).string());
  }
}

void Trainer::take_snapshot(int world) {
  if (servers_) return;  // the parameter servers hold the state; nothing is rolled back
  auto t = Clock::now();
  std::shared_ptr<StateCopy> copy = snapshots_.recycle(state_.step);
  copy->capture(*model_, optimizer_.get());
  snapshots_.take({.state = state_,
                   .meta = position(world),
                   .sync_state = mode_ ? mode_->save_state() : "",
                   .copy = std::move(copy)});
  snapshot_s_ += seconds_since(t);
}

json Trainer::run() {
  // The workers of the start hold the seed's initial state; a replacement receives it.
  membership_ = ctx_.agent.join();
  if (membership_.epoch == 0 && ctx_.resume_from.empty()) {
    // Every worker of the start built the same model from the seed: a failure before the first
    // commit restores this.
    take_snapshot(static_cast<int>(membership_.members.size()));
    have_state_ = true;
  }
  for (;;) {
    std::string leave_reason;
    try {
      return run_epoch();
    } catch (const MembershipSwitch&) {
      leave_reason = "";  // a graceful switch: nothing in flight
      spdlog::info("leaving membership epoch {} at step {}: a worker joins", membership_.epoch,
                   state_.step);
    } catch (const ServerWorker::LeaveRequested&) {
      // Waiting on the parameter servers (the staleness bound, the end) when the membership
      // changed: nothing of this worker's is lost, its pushes are on the servers.
      leave_reason = "";
      spdlog::info("leaving membership epoch {} at step {}: the membership changes",
                   membership_.epoch, state_.step);
    } catch (const Error& e) {
      if (!is_membership_failure(e)) throw;
      leave_reason = e.what();
      spdlog::warn("leaving membership epoch {} at step {}: {}", membership_.epoch, state_.step,
                   e.what());
    }
    ctx_.agent.disconnect(leave_reason);
    membership_ = ctx_.agent.rejoin(
        membership_,
        {{"step", state_.step},
         {"snapshot_step", have_state_ && !servers_ ? snapshots_.newest().state.step : -1}});
  }
}

void Trainer::start_tracing() {
  if (!cfg_.trace.enabled || tracer_ || ctx_.run_dir.empty()) return;
  tracer_ = std::make_unique<trace::Tracer>(
      trace::TracerOptions{.path = (std::filesystem::path(ctx_.run_dir) / "trace" /
                                    ("rank-" + std::to_string(job_rank_) + ".json"))
                                       .string(),
                           .rank = job_rank_,
                           .max_pending = static_cast<size_t>(cfg_.trace.max_pending_events),
                           .clock_offset_us = clock_offset_us_});
  recorder_.set_observer(tracer_.get());
}

json Trainer::run_epoch() {
  comm::Communicator& comm = ctx_.agent.connect(membership_);
  log::set_context(job_rank_, membership_.epoch, state_.step);
  // The communicator's errors name its own ranks, the members' positions: after a loss or a join
  // they are not the job's ranks, so the log says which is which.
  bool renumbered = false;
  std::string ranks;
  for (size_t i = 0; i < membership_.members.size(); ++i) {
    renumbered |= membership_.members[i] != static_cast<int>(i);
    ranks += (i ? ", " : "") + std::to_string(i) + " = " + std::to_string(membership_.members[i]);
  }
  if (renumbered) {
    spdlog::info("membership epoch {}: communicator rank = job rank: {}", membership_.epoch, ranks);
  }
  // Clock offsets are measured by the workers of the start together; a replacement that joins
  // later keeps its own clock.
  if (membership_.epoch == 0) clock_offset_us_ = trace::measure_clock_offset(comm);
  start_tracing();
  ddp::DistributedDataParallel ddp(
      model_, comm,
      {.bucket_bytes = static_cast<size_t>(cfg_.comm.bucket_mb * (1 << 20)),
       .algorithm = comm::parse_algorithm(cfg_.comm.algorithm),
       .broadcast_on_construct = false,
       .buffers = ddp::parse_buffer_sync(cfg_.comm.buffers),
       .compression = compression_options(cfg_),
       .on_bucket_ready = [this](size_t bucket, size_t bytes) {
         if (tracer_) tracer_->instant("bucket " + std::to_string(bucket) + " ready", bytes);
       }});
  const ModeParts parts{.config = cfg_,
                        .model = *model_,
                        .optimizer = *optimizer_,
                        .ddp = ddp,
                        .phase = [this](comm::Phase p) { phase(state_.step + 1, p); }};
  std::unique_ptr<SyncMode> mode =
      servers_ ? make_server_mode(parts, *servers_) : make_sync_mode(parts);
  mode_ = mode.get();
  struct ModeGuard {
    SyncMode*& m;
    ~ModeGuard() { m = nullptr; }
  } mode_guard{mode_};
  Epoch e{.comm = comm,
          .rank = comm.rank(),
          .world = comm.size(),
          .data_rank = comm.rank(),
          .data_world = comm.size(),
          .ddp = ddp,
          .mode = *mode,
          .bytes_before = comm_bytes_,
          .bytes_at_connect = comm.stats().bytes_sent};
  // The members of the first membership epoch start from the seed's model (or the checkpoint
  // they resume); every later epoch restores. Decided alike on every rank from the epoch alone:
  // a rank that got further through a start that failed holds no other state than the rest.
  const bool fresh = membership_.epoch == 0;
  if (fresh) {
    start_fresh(e);
  } else if (!servers_) {
    restore(e);
  }
  if (servers_) begin_servers(e, fresh);
  // Compression warm-up counts training steps: a resumed job does not warm up again.
  ddp.set_step(state_.step);
  plan_epoch(e);

  status_.maybe_report("training", state_.step, e.total_steps, state_.epoch, e.bytes_now(), true);
  while (state_.epoch < cfg_.train.epochs && state_.step < max_steps_ && !reached_) {
    e.sampler->reset(state_.epoch, state_.consumed);
    e.pending_epoch = state_.epoch;
    bool epoch_end = false;
    while (!epoch_end && state_.step < max_steps_ && !reached_) {
      phase(state_.step + 1, comm::Phase::Data);
      faults_.at_step(state_.step, &comm);
      auto t0 = Clock::now();
      if (!t_train_) t_train_ = t0;
      auto batch = e.sampler->next();
      if (!batch) {
        // Nothing left of this epoch at this world size: with drop_last, what a larger world
        // (a joiner, a resume with more workers) leaves is less than one global batch. The
        // epoch ends here, on every rank alike (the position is the same everywhere).
        state_.epoch += 1;
        state_.consumed = 0;
        break;
      }
      train_step(e, *batch, t0);
      epoch_end = e.sampler->steps_remaining() == 0;
      state_.epoch = epoch_end ? state_.epoch + 1 : state_.epoch;
      state_.consumed = epoch_end ? 0 : e.sampler->consumed();
      if (after_step(e, epoch_end)) throw MembershipSwitch{};
    }
  }
  train_s_ = train_seconds();
  if (servers_) finish_servers(e);
  // The last step's, unless it has one already; not written when nothing was trained since the
  // resume (resumed_from_ is the original workers' alone, so it decides only the write).
  if (cfg_.checkpoint.every_steps > 0 && state_.step % cfg_.checkpoint.every_steps != 0) {
    save_checkpoint_now(e, /*write=*/state_.step > resumed_from_);
  }
  status_.maybe_report("evaluating", state_.step, e.total_steps, state_.epoch, e.bytes_now(), true);
  mode->synchronize();
  phase(state_.step, comm::Phase::Evaluate);
  // With parameter servers only rank 0 evaluated during training, on the model of its step: the
  // final model, every rank's share of the test set.
  const Evaluation ev = newest_eval_ && newest_eval_->first == state_.step && !servers_
                            ? newest_eval_->second
                            : evaluate(*model_, test_set_, comm);
  phase(state_.step, comm::Phase::Done);
  recovery_done(e);
  comm_bytes_ = e.bytes_now();
  return summary(e, ev);
}

void Trainer::plan_epoch(Epoch& e) {
  e.sampler.emplace(SamplerOptions{.dataset_size = train_set_.size(),
                                   .world_size = e.data_world,
                                   .rank = e.data_rank,
                                   .batch_size = cfg_.train.batch_size,
                                   .seed = cfg_.train.seed,
                                   .drop_last = cfg_.train.drop_last});
  // The peak learning rate follows the world size when lr_schedule.scaling is linear.
  e.schedule.emplace(cfg_.train.optimizer, cfg_.train.lr_schedule, e.data_world);
  e.total_steps = state_.step;
  if (state_.epoch < cfg_.train.epochs) {
    e.sampler->reset(state_.epoch, state_.consumed);
    e.total_steps += e.sampler->steps_remaining() +
                     (cfg_.train.epochs - state_.epoch - 1) * e.sampler->steps_per_epoch();
  }
  e.total_steps = std::min(e.total_steps, max_steps_);
  e.pending_epoch = state_.epoch;
  e.window = ProgressWindow();  // rates count from the first step of the epoch
}

void Trainer::recovery_done(Epoch& e) {
  if (!e.report_recovery) return;
  e.report_recovery = false;
  ctx_.agent.report_recovered(membership_, {{"restored_step", e.restored_step},
                                            {"steps_rolled_back", e.rolled_back},
                                            {"step", state_.step},
                                            {"time", wall_seconds()}});
}

void Trainer::train_step(Epoch& e, const Batch& batch, Clock::time_point t0) {
  auto [x, y] = train_set_.batch(batch.indices);
  const auto t1 = Clock::now();
  const double step_data = std::chrono::duration<double>(t1 - t0).count();
  data_s_ += step_data;

  phase(state_.step + 1, comm::Phase::Forward);
  set_learning_rate(*optimizer_, e.schedule->at(state_.step));
  optimizer_->zero_grad();
  auto logits = model_->forward(x);
  auto loss_sum = torch::nn::functional::cross_entropy(
      logits, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
  // DDP averages over ranks: scale so the result is the mean over the global batch.
  auto loss =
      loss_sum * (static_cast<double>(e.data_world) / static_cast<double>(batch.global_batch));
  const ddp::DdpStats before = e.ddp.stats();
  const comm::CollectiveTotals coll_before = recorder_.totals();
  EpochCount trained;
  for (int64_t i : batch.indices) {
    const auto d = static_cast<double>(i);
    trained.samples += 1;
    trained.id_sum += d;
    trained.id_sq_sum += d * d;
  }
  const int64_t staleness = servers_ ? servers_->count_staleness() : -1;  // of the parameters used
  if (servers_) servers_->set_samples(state_.epoch, trained);
  const StepSync sync = e.mode.step(loss, state_.step);
  const comm::CollectiveTotals coll = recorder_.totals();
  const double waited = sync.wait_s;
  double step_compute = seconds_since(t1) - waited - sync.held_s;
  if (sync.held_s > 0) {
    // Held while another worker evaluated: not training time.
    eval_s_ += sync.held_s;
    e.window.exclude(
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(sync.held_s)));
  }
  // A slow worker (faults: slow, stragglers): its step takes longer, counted as compute.
  if (double slow = faults_.slowdown(state_.step, step_data + step_compute); slow > 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(slow));
    step_compute += slow;
  }
  grad_sent_ += e.ddp.stats().bytes_sent - before.bytes_sent;
  grad_received_ += e.ddp.stats().bytes_received - before.bytes_received;
  grad_uncompressed_ += e.ddp.stats().uncompressed_bytes - before.uncompressed_bytes;
  compute_s_ += step_compute;
  comm_s_ += waited;
  if (step_log_) {
    step_log_->append({.step = state_.step + 1,
                       .epoch = membership_.epoch,
                       .world = e.world,
                       .end_us = comm::now_us(),
                       .data_s = step_data,
                       .compute_s = step_compute,
                       .sync_s = waited,
                       .ready_us = sync.synced_us - static_cast<int64_t>(waited * 1e6),
                       .sent_bytes = coll.sent_bytes - coll_before.sent_bytes,
                       .collective_us = coll.active_us - coll_before.active_us,
                       .collective_wait_us = coll.wait_us - coll_before.wait_us,
                       .staleness = staleness});
  }
  const auto n = static_cast<int64_t>(batch.indices.size());
  const int64_t correct = logits.argmax(1).eq(y).sum().item<int64_t>();

  ++state_.step;
  if (cfg_.debug.check_params_every > 0 && state_.step % cfg_.debug.check_params_every == 0 &&
      e.mode.replicas_agree()) {
    e.ddp.check_parameters("step " + std::to_string(state_.step));
  }
  samples_ += n;
  e.busy_s += step_data + step_compute;
  e.busy_steps += 1;
  e.pending.samples += trained.samples;
  e.pending.id_sum += trained.id_sum;
  e.pending.id_sq_sum += trained.id_sq_sum;
  if (n > 0) last_loss_ = loss_sum.item<double>() / static_cast<double>(n);
  e.window.add(last_loss_, correct, n, batch.global_batch);
  log::set_step(state_.step);
  recovery_done(e);
  if (servers_) status_.set_staleness(servers_->staleness());
  status_.step(state_.step, step_data, step_compute, waited, n);
  status_.maybe_report("training", state_.step, e.total_steps, state_.epoch, e.bytes_now());
}

// Evaluation, the progress record, the commit and the checkpoint that follow a step. Returns
// whether every rank leaves the membership epoch (after this step's checkpoint, if it has one).
bool Trainer::after_step(Epoch& e, bool epoch_end) {
  if (servers_) return after_server_step(e, epoch_end);
  const bool evaluate_now =
      cfg_.train.eval_every_steps > 0 && state_.step % cfg_.train.eval_every_steps == 0;
  if (evaluate_now) {
    e.mode.synchronize();  // the model every replica has is the one evaluated
    phase(state_.step, comm::Phase::Evaluate);
    auto t_eval = Clock::now();
    newest_eval_.emplace(state_.step, evaluate(*model_, test_set_, e.comm));
    const auto spent = Clock::now() - t_eval;
    eval_s_ += std::chrono::duration<double>(spent).count();
    e.window.exclude(spent);
    // Every rank has the same allreduced accuracy, so all of them stop at the same step.
    reached_ = cfg_.train.stop_at_accuracy > 0 &&
               newest_eval_->second.accuracy >= cfg_.train.stop_at_accuracy;
  }
  const bool last = state_.step >= e.total_steps || state_.epoch >= cfg_.train.epochs || reached_;
  report_progress(e, last, epoch_end, evaluate_now);
  bool leave_epoch = false;
  // A checkpoint step is a commit too: the file then holds the sample counts of its position.
  const bool checkpoint_now =
      cfg_.checkpoint.every_steps > 0 && state_.step % cfg_.checkpoint.every_steps == 0;
  if (epoch_end || last || state_.step >= max_steps_ || e.mode.commit_due(state_.step) ||
      checkpoint_now) {
    e.mode.synchronize();  // a snapshot holds the model every replica has
    comm_bytes_ = e.bytes_now();
    leave_epoch = commit(e, /*may_switch=*/!last);
  }
  if (checkpoint_now) save_checkpoint_now(e, /*write=*/true);
  return leave_epoch;
}

void Trainer::report_progress(Epoch& e, bool last, bool epoch_end, bool evaluated) {
  if (e.rank != 0 || !ctx_.report_progress) return;
  if (state_.step % cfg_.train.log_every_steps != 0 && !last && !epoch_end && !evaluated) return;
  json record = e.window.record(state_.step, e.total_steps, e.pending_epoch, cfg_.train.epochs,
                                learning_rate(*optimizer_), e.world);
  if (evaluated) {
    record["test_accuracy"] = newest_eval_->second.accuracy;
    record["test_loss"] = newest_eval_->second.loss;
    record["train_seconds"] = train_seconds();
  }
  ctx_.report_progress(record);
}

// Commit: add up the samples trained since the last commit and take a snapshot. Returns whether
// any rank saw a request for the next membership epoch, which every rank then leaves together.
bool Trainer::commit(Epoch& e, bool may_switch) {
  // With sync.balance the same allreduce carries every rank's busy time per step (its own slot).
  std::vector<double> v = {e.pending.samples, e.pending.id_sum, e.pending.id_sq_sum,
                           ctx_.agent.change_requested() ? 1.0 : 0.0};
  if (cfg_.sync.balance) {
    v.resize(4 + static_cast<size_t>(e.world), 0.0);
    if (e.busy_steps > 0) {
      v[4 + static_cast<size_t>(e.rank)] = e.busy_s / static_cast<double>(e.busy_steps);
    }
  }
  e.comm.allreduce(Buffer{DType::F64, v.data(), v.size()}, {.op = comm::ReduceOp::Sum})->wait();
  if (state_.counts.size() <= static_cast<size_t>(e.pending_epoch)) {
    state_.counts.resize(static_cast<size_t>(e.pending_epoch) + 1);
  }
  auto& c = state_.counts[static_cast<size_t>(e.pending_epoch)];
  c.samples += v[0];
  c.id_sum += v[1];
  c.id_sq_sum += v[2];
  e.pending = {};
  e.pending_epoch = state_.epoch;
  take_snapshot(e.world);
  if (cfg_.sync.balance) rebalance(e, {v.begin() + 4, v.end()});
  return may_switch && v[3] > 0;
}

// sync.balance: from every rank's busy time per step since the last commit (exchanged by the
// commit's allreduce), new shares that move each rank's busy time towards the mean: share x mean /
// own, by at most a factor of 2 per commit. With a cost proportional to the samples this lands on
// shares in proportion to speed at once; a fixed cost per step (which makes a small share's time
// per sample look worse and would starve a slow rank if shares followed it) is converged on over
// a few commits. The same numbers on every rank give the same shares.
void Trainer::rebalance(Epoch& e, const std::vector<double>& per_step) {
  const auto world = static_cast<size_t>(e.world);
  e.busy_s = 0;
  e.busy_steps = 0;
  if (std::any_of(per_step.begin(), per_step.end(), [](double t) { return !(t > 0); })) return;
  double mean = 0;
  for (double t : per_step) mean += t / static_cast<double>(world);
  if (e.shares.size() != world) e.shares.assign(world, 1.0 / static_cast<double>(world));
  double sum = 0;
  for (size_t r = 0; r < world; ++r) {
    e.shares[r] *= std::clamp(mean / per_step[r], 0.5, 2.0);
    sum += e.shares[r];
  }
  for (double& w : e.shares) w /= sum;
  e.sampler->set_shares(e.shares);
}

// A checkpoint of this step, written by rank 0. With gradient compression every rank's codec
// state (residuals, PowerSGD's factors) goes with it, so that a resumed job continues exactly:
// then every rank calls this at the same step. `write`: whether rank 0 writes it (every rank
// gathers the codec states all the same, so that whether they take part depends only on the
// step, which every rank shares).
void Trainer::save_checkpoint_now(Epoch& e, bool write) {
  if (servers_) return save_server_checkpoint(e, write);
  e.mode.synchronize();  // a checkpoint holds the model every replica has
  const bool compressed = compression_options(cfg_).method != compress::Method::None;
  write = write && e.rank == 0 && checkpoints_;
  if (!compressed && !write) return;
  phase(state_.step, comm::Phase::Checkpoint);
  auto t = Clock::now();
  std::vector<std::string> codec_states;
  if (compressed) codec_states = e.ddp.gather_bytes(e.ddp.codec_state());
  if (!write) return;
  auto path = checkpoints_->save(position(e.world), *model_, optimizer_.get(),
                                 {.codec_states = codec_states,
                                  .sync_state = e.mode.save_state(),
                                  .sync_mode = std::string(sync_kind_name(cfg_.sync.mode)),
                                  .train_state = state_.to_json().dump()});
  spdlog::info("checkpoint {} written in {:.2f} s", path.string(), seconds_since(t));
}

json Trainer::summary(Epoch& e, const Evaluation& ev) {
  json epoch_samples = json::array();
  for (size_t i = 0; i < state_.counts.size(); ++i) {
    epoch_samples.push_back({{"epoch", i},
                             {"samples", state_.counts[i].samples},
                             {"id_sum", state_.counts[i].id_sum},
                             {"id_sq_sum", state_.counts[i].id_sq_sum}});
  }
  json s{{"rank", e.rank},
         {"job_rank", job_rank_},
         {"membership_epoch", membership_.epoch},
         {"world_size", e.world},
         {"steps", state_.step},
         // Epochs trained: whole ones plus the part of the current one.
         {"epochs", static_cast<double>(state_.epoch) + static_cast<double>(state_.consumed) /
                                                            static_cast<double>(train_set_.size())},
         {"samples", samples_},
         {"train_seconds", train_s_},
         {"compute_seconds", compute_s_},
         {"comm_seconds", comm_s_},
         {"data_seconds", data_s_},
         {"snapshot_seconds", snapshot_s_},
         {"eval_seconds", eval_s_},
         {"comm_bytes", comm_bytes_},
         // Gradient exchange only (model averaging in local SGD): what went on the wire, and what
         // an uncompressed f32 ring allreduce of the same buckets would have sent.
         {"grad_bytes_sent", grad_sent_},
         {"grad_bytes_received", grad_received_},
         {"grad_bytes_uncompressed", grad_uncompressed_},
         {"compression", cfg_.comm.compression},
         // The transport probe at start-up (trace/step_log.h; 0: none).
         {"probe_bytes", probe_ ? probe_->probe_bytes : 0},
         {"probe_busbw_gbps", probe_ ? probe_->probe_busbw_gbps : 0.0},
         // The threads of this worker's matrix products (OpenBLAS's pool: threads_per_worker).
         {"blas_threads", compress::blas_threads()},
         {"test_accuracy", ev.accuracy},
         {"test_loss", ev.loss},
         {"final_loss", last_loss_},
         {"parameter_digest", e.ddp.parameter_digest()},
         {"buffer_digest", e.ddp.buffer_digest()},
         {"resumed_from_step", resumed_from_},
         {"restores", restores_},
         {"epoch_samples", epoch_samples},
         {"sync_mode", sync_kind_name(cfg_.sync.mode)}};
  if (cfg_.sync.balance) s["balance_shares"] = e.shares;  // each rank's share at the end
  s.update(e.mode.summary());
  return s;
}

}  // namespace cohort::train::detail

namespace cohort::train {

nlohmann::json train(TrainerContext& ctx) {
  torch::set_num_threads(static_cast<int>(ctx.config.threads_per_worker));
  // OpenBLAS's pool too (libtorch's matrix products and PowerSGD's): a worker whose launcher did
  // not size it through the environment would otherwise use every CPU of the host.
  compress::set_blas_threads(static_cast<int>(ctx.config.threads_per_worker));
  if (ctx.recorder) ctx.recorder->set_activity(0, comm::Phase::Setup);
  detail::Trainer trainer(ctx);
  return trainer.run();
}

}  // namespace cohort::train
