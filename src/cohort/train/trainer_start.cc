// The start of a membership epoch (trainer_impl.h): the workers of the start, a resume from a
// checkpoint, and a restore from the snapshots after the membership changed; and the helpers
// they use.
#include <signal.h>
#include <torch/torch.h>
#include <unistd.h>

#include "cohort/base/file.h"
#include "cohort/base/log.h"
#include "cohort/train/trainer_impl.h"

namespace cohort::train::detail {

// Errors after which the survivors meet again at the next membership epoch. Anything else (a bad
// checkpoint, a bug) ends the worker.
bool is_membership_failure(const std::exception& e) {
  return dynamic_cast<const PeerLostError*>(&e) || dynamic_cast<const TimeoutError*>(&e) ||
         dynamic_cast<const AbortedError*>(&e);
}

// The transport probe: an allreduce of `mb` MB timed `iterations` times after one warm-up, the
// fastest kept. Every rank of the communicator calls it.
trace::RankHeader probe_transport(comm::Communicator& comm, double mb, comm::Algorithm algorithm,
                                  int job_rank, int64_t clock_offset_us) {
  trace::RankHeader h{.rank = job_rank,
                      .world = comm.size(),
                      .clock_offset_us = clock_offset_us,
                      .algorithm = std::string(comm::algorithm_name(algorithm))};
  const auto count = static_cast<size_t>(mb * 1e6 / 4);
  if (comm.size() < 2 || count == 0) return h;
  std::vector<float> data(count, 1.0f);
  constexpr int kIterations = 3;
  double best = std::numeric_limits<double>::max();
  for (int i = 0; i <= kIterations; ++i) {
    auto t = Clock::now();
    comm.allreduce(Buffer{DType::F32, data.data(), count},
                   {.op = comm::ReduceOp::Sum, .algorithm = algorithm})
        ->wait();
    if (i > 0) best = std::min(best, seconds_since(t));
  }
  const double n = comm.size();
  h.probe_bytes = count * 4;
  h.probe_iterations = kIterations;
  h.probe_seconds = best;
  h.probe_busbw_gbps = static_cast<double>(h.probe_bytes) * 2 * (n - 1) / n / best / 1e9;
  return h;
}

// The codec state this rank had when the checkpoint `name` was written, if it holds one for a
// job of this world size (compression that resumes otherwise starts with empty residuals).
void restore_codec_state(ddp::DistributedDataParallel& ddp,
                         const std::vector<std::string>& codec_states, int rank, int world,
                         const std::string& name) {
  if (codec_states.empty()) return;
  if (codec_states.size() != static_cast<size_t>(world)) {
    spdlog::warn(
        "{}: holds the codec state of {} ranks, this job has {}: compression starts "
        "with empty residuals",
        name, codec_states.size(), world);
    return;
  }
  try {
    ddp.load_codec_state(codec_states[static_cast<size_t>(rank)]);
  } catch (const Error& e) {
    spdlog::warn(
        "{}: its codec state does not fit this job's compression ({}): compression "
        "starts with empty residuals",
        name, e.what());
  }
}

compress::CompressionOptions compression_options(const JobConfig& cfg) {
  const CommConfig& c = cfg.comm;
  return {.method = compress::parse_method(c.compression),
          .error_feedback = c.error_feedback,
          .int8_chunk = static_cast<size_t>(c.int8_chunk),
          .int8_stochastic_rounding = c.int8_stochastic_rounding,
          .topk_ratio = c.topk_ratio,
          .topk_warmup_steps = c.topk_warmup_steps,
          .powersgd_rank = static_cast<int>(c.powersgd_rank),
          .powersgd_warmup_steps = c.powersgd_warmup_steps,
          .min_bytes = static_cast<size_t>(c.compression_min_kb * 1024),
          .seed = cfg.train.seed};
}

void Trainer::start_fresh(Epoch& e) {
  e.ddp.broadcast_parameters(0);
  const trace::RankHeader header =
      probe_transport(e.comm, cfg_.debug.bandwidth_probe_mb,
                      comm::parse_algorithm(cfg_.comm.algorithm), job_rank_, clock_offset_us_);
  if (header.probe_bytes > 0) {
    spdlog::info("transport probe: allreduce of {:.1f} MB in {:.2f} ms, {:.2f} GB/s bus bandwidth",
                 static_cast<double>(header.probe_bytes) / 1e6, 1e3 * header.probe_seconds,
                 header.probe_busbw_gbps);
  }
  probe_ = header;
  if (step_log_) step_log_->header(header);
  if (!ctx_.resume_from.empty()) resume_from_checkpoint(e);
  take_snapshot(e.world);
  have_state_ = true;
}

void Trainer::resume_from_checkpoint(Epoch& e) {
  // Rank 0 picks and reads the checkpoint; every rank restores the same bytes.
  std::string bytes, name;
  if (e.rank == 0) {
    CheckpointDir dir(ctx_.resume_from, cfg_.checkpoint.keep);
    std::vector<std::string> skipped;
    auto newest = dir.newest_valid(&skipped);  // logs each corrupt checkpoint it skips
    if (!newest) {
      throw Error("no valid checkpoint to resume from in " + ctx_.resume_from +
                  (skipped.empty() ? ""
                                   : " (" + std::to_string(skipped.size()) +
                                         " corrupt: " + skipped.front() + ")"));
    }
    name = newest->path.string();
    bytes = read_file(newest->path);
    if (ctx_.report_event) {
      ctx_.report_event({{"event", "resumed_from_checkpoint"},
                         {"path", name},
                         {"step", newest->step},
                         {"skipped", skipped}});
    }
  }
  name = e.ddp.broadcast_bytes(name);
  bytes = e.ddp.broadcast_bytes(bytes);
  CheckpointExtras extras;
  CheckpointMeta pos = decode_checkpoint(bytes, name, *model_, optimizer_.get(), true, &extras);
  restore_codec_state(e.ddp, extras.codec_states, e.rank, e.world, name);
  const std::string mode(sync_kind_name(cfg_.sync.mode));
  if (!extras.sync_mode.empty() && extras.sync_mode != mode) {
    // Another mode's state means nothing to this one (and its bytes would be misread): the job
    // goes on from the checkpoint's model.
    if (e.rank == 0 && !extras.sync_state.empty()) {
      spdlog::warn(
          "{} was written with sync.mode {}, and this job runs {}: its {} state is not "
          "carried over; training goes on from its model",
          name, extras.sync_mode, mode, extras.sync_mode);
    }
  } else {
    e.mode.load_state(extras.sync_state);
  }
  resumed_model_ = true;
  if (!extras.train_state.empty()) {
    try {
      state_.counts = TrainState::from_json(json::parse(extras.train_state)).counts;
    } catch (const json::exception& ex) {
      throw CheckpointError(name + ": malformed committed sample counts: " + ex.what());
    }
  } else {
    spdlog::warn(
        "{} holds no sample counts (written by an older Cohort): the summary's "
        "epoch_samples count only what this run trains",
        name);
  }
  state_.step = resumed_from_ = pos.step;
  state_.epoch = pos.epoch;
  state_.consumed = pos.consumed;
  spdlog::info("resumed from {} at step {} (epoch {}, {} samples consumed)", name, pos.step,
               pos.epoch, pos.consumed);
}

void Trainer::restore(Epoch& e) {
  if (step_log_ && !probe_) {
    probe_ = trace::RankHeader{.rank = job_rank_, .world = e.world};
    step_log_->header(*probe_);
  }
  // Agree on the newest snapshot every rank that has state holds, and who sends it to the ranks
  // without: min over ranks of (newest snapshot, -steps reached, -needs state, rank).
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  int64_t v[4] = {have_state_ ? snapshots_.newest().state.step : kNone, -state_.step,
                  have_state_ ? 0 : -1, have_state_ ? e.rank : kNone};
  e.comm.allreduce(Buffer{DType::I64, v, 4}, {.op = comm::ReduceOp::Min})->wait();
  // An evaluation that met train.stop_at_accuracy after the restored step is undone with it; the
  // same on every rank, since every rank restores the same step.
  reached_ = false;
  if (v[0] == kNone) {
    if (ctx_.resume_from.empty()) {
      throw Error("membership epoch " + std::to_string(membership_.epoch) +
                  ": no member holds the training state (every worker that had it was lost)");
    }
    // A resumed job whose start failed before any rank held the checkpoint's state (or whose
    // every holder was lost): the checkpoint directory still holds it.
    spdlog::warn("membership epoch {}: no member holds the training state; resuming from {} again",
                 membership_.epoch, ctx_.resume_from);
    resume_from_checkpoint(e);
    take_snapshot(e.world);
    have_state_ = true;
    e.restored_step = state_.step;
    e.rolled_back = std::max<int64_t>(0, -v[1] - e.restored_step);
    ++restores_;
    e.report_recovery = e.rank == 0;
    return;
  }
  e.restored_step = v[0];
  const int root = static_cast<int>(v[3]);
  const bool send = v[2] < 0;  // some rank has no state: the root sends it a checkpoint's bytes
  std::string bytes, state_json, sync_state;
  if (have_state_) {
    const Snapshot* snap = snapshots_.find(e.restored_step);
    if (!snap) {
      throw Error("rank " + std::to_string(job_rank_) + " holds no snapshot of step " +
                  std::to_string(e.restored_step) + " (its newest is of step " +
                  std::to_string(snapshots_.newest().state.step) + ")");
    }
    snap->copy->restore(*model_, optimizer_.get());
    state_ = snap->state;
    sync_state = snap->sync_state;
    if (send && e.rank == root) {
      bytes = encode_checkpoint(snap->meta, *model_, optimizer_.get(), {.sync_state = sync_state});
      state_json = state_.to_json().dump();
    }
  }
  if (send) {
    bytes = e.ddp.broadcast_bytes(e.rank == root ? bytes : std::string(), root);
    state_json = e.ddp.broadcast_bytes(e.rank == root ? state_json : std::string(), root);
  }
  if (!have_state_) {
    CheckpointExtras extras;
    decode_checkpoint(bytes, "snapshot of step " + std::to_string(e.restored_step), *model_,
                      optimizer_.get(), /*restore_rng=*/true, &extras);
    sync_state = std::move(extras.sync_state);
    state_ = TrainState::from_json(json::parse(state_json));
  }
  e.rolled_back = std::max<int64_t>(0, -v[1] - e.restored_step);
  e.mode.load_state(sync_state);
  // The snapshot restored is the only one kept; a rank that received it takes its own copy.
  if (have_state_) {
    snapshots_.keep_only(e.restored_step);
  } else {
    std::shared_ptr<StateCopy> copy = snapshots_.recycle(state_.step);
    copy->capture(*model_, optimizer_.get());
    snapshots_.reset({.state = state_,
                      .meta = position(e.world),
                      .sync_state = std::move(sync_state),
                      .copy = std::move(copy)});
  }
  have_state_ = true;
  ++restores_;
  e.report_recovery = e.rank == 0;
  spdlog::info(
      "membership epoch {}: {} workers; restored the snapshot of step {} (epoch {}, {} samples "
      "consumed), {} steps rolled back{}",
      membership_.epoch, e.world, e.restored_step, state_.epoch, state_.consumed, e.rolled_back,
      v[2] < 0 ? ", state sent by rank " + std::to_string(root) : "");
}

}  // namespace cohort::train::detail
