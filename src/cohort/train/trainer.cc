#include "cohort/train/trainer.h"

#include <signal.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <filesystem>
#include <limits>
#include <optional>
#include <set>
#include <thread>

#include "cohort/base/clock.h"
#include "cohort/base/file.h"
#include "cohort/base/histogram.h"
#include "cohort/base/log.h"
#include "cohort/ddp/distributed_data_parallel.h"
#include "cohort/trace/step_log.h"
#include "cohort/trace/tracer.h"
#include "cohort/train/checkpoint.h"
#include "cohort/train/dataset.h"
#include "cohort/train/faults.h"
#include "cohort/train/models.h"
#include "cohort/train/sampler.h"
#include "cohort/train/schedule.h"

namespace cohort::train {

using nlohmann::json;

namespace {

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The samples of one epoch trained on: how many, and the sum and sum of squares of their indices.
// After a full epoch they are N, N(N-1)/2 and (N-1)N(2N-1)/6 exactly when each sample of [0, N)
// was trained on once (doubles hold these integers exactly for any data set that fits in memory).
struct EpochCount {
  double samples = 0;
  double id_sum = 0;
  double id_sq_sum = 0;
};

// The replicated state outside the model and optimizer: the step, the sampler's position and the
// committed sample counts of every epoch.
struct TrainState {
  int64_t step = 0;
  int64_t epoch = 0;
  int64_t consumed = 0;
  std::vector<EpochCount> counts;

  json to_json() const {
    json c = json::array();
    for (const auto& e : counts) c.push_back({e.samples, e.id_sum, e.id_sq_sum});
    return {{"step", step}, {"epoch", epoch}, {"consumed", consumed}, {"counts", c}};
  }
  static TrainState from_json(const json& j) {
    TrainState s{.step = j.at("step").get<int64_t>(),
                 .epoch = j.at("epoch").get<int64_t>(),
                 .consumed = j.at("consumed").get<int64_t>(),
                 .counts = {}};
    for (const auto& c : j.at("counts")) {
      s.counts.push_back({c.at(0).get<double>(), c.at(1).get<double>(), c.at(2).get<double>()});
    }
    return s;
  }
};

// A committed state: TrainState plus the model, optimizer and generator (encode_checkpoint).
struct Snapshot {
  TrainState state;
  std::string bytes;
};

// Every rank leaves the membership epoch at a commit because a joiner waits to be admitted.
struct MembershipSwitch {};

// Errors after which the survivors meet again at the next membership epoch. Anything else (a bad
// checkpoint, a bug) ends the worker.
bool is_membership_failure(const std::exception& e) {
  return dynamic_cast<const PeerLostError*>(&e) || dynamic_cast<const TimeoutError*>(&e) ||
         dynamic_cast<const AbortedError*>(&e);
}

struct Evaluation {
  double accuracy = 0;
  double loss = 0;
};

// Rank r evaluates test examples r, r+W, r+2W, ...; correct counts and loss sums are added up.
Evaluation evaluate(Model& model, const Dataset& test, comm::Communicator& comm) {
  torch::NoGradGuard no_grad;
  model.eval();
  double sums[3] = {0, 0, 0};  // correct, count, loss sum
  const int64_t n = test.size(), world = comm.size();
  std::vector<int64_t> idx;
  for (int64_t i = comm.rank(); i < n; i += world) idx.push_back(i);
  const size_t chunk = 1000;
  for (size_t off = 0; off < idx.size(); off += chunk) {
    std::vector<int64_t> part(idx.begin() + off, idx.begin() + std::min(idx.size(), off + chunk));
    auto [x, y] = test.batch(part);
    auto logits = model.forward(x);
    sums[0] += logits.argmax(1).eq(y).sum().item<double>();
    sums[1] += static_cast<double>(part.size());
    sums[2] +=
        torch::nn::functional::cross_entropy(
            logits, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
            .item<double>();
  }
  comm.allreduce(Buffer{DType::F64, sums, 3}, {.op = comm::ReduceOp::Sum})->wait();
  model.train();
  return {sums[1] > 0 ? sums[0] / sums[1] : 0, sums[1] > 0 ? sums[2] / sums[1] : 0};
}

// A rank's live status for the console and the launcher: step time, the share of it spent waiting
// on gradient exchange, a histogram of that wait, the latency histograms of every kind of
// collective (from the flight recorder), the step's breakdown (data, compute, sync), and the busy
// time (data + compute) of every step since the previous record and of the `window` before (so
// that a reader who misses one record still sees whole windows), from which the launcher tells
// stragglers (trace/straggler.h). Published about twice a second.
class StatusReporter {
 public:
  StatusReporter(const TrainerContext& ctx, const comm::FlightRecorder& recorder, size_t window)
      : report_(ctx.report_status),
        recorder_(recorder),
        window_(std::clamp<size_t>(window, 1, 1000)) {}

  void step(int64_t step, double data_s, double compute_s, double wait_seconds, int64_t samples) {
    const double seconds = data_s + compute_s + wait_seconds;
    wait_hist_.observe(wait_seconds);
    steps_ += 1;
    step_seconds_ += seconds;
    wait_seconds_ += wait_seconds;
    data_seconds_ += data_s;
    compute_seconds_ += compute_s;
    samples_ += samples;
    // Consecutive steps only: a rollback starts the window again.
    if (step != busy_last_ + 1) busy_.clear();
    busy_.push_back(static_cast<int64_t>((data_s + compute_s) * 1e6));
    if (busy_.size() > kMaxBusy) busy_.pop_front();
    busy_last_ = step;
  }
  // Publishes if `force` or half a second has passed since the last record.
  void maybe_report(const char* state, int64_t step, int64_t total, int64_t epoch, uint64_t bytes,
                    bool force = false) {
    if (!report_ || (!force && seconds_since(last_) < 0.5)) return;
    json latency = json::object();
    for (const auto& [kind, h] : recorder_.latencies()) {
      latency[std::string(comm::op_kind_name(kind))] = histogram_json(h);
    }
    json s{{"state", state},
           {"step", step},
           {"total_steps", total},
           {"epoch", epoch},
           {"bytes_sent", bytes},
           {"comm_wait_hist", histogram_json(wait_hist_)},
           {"collective_latency", std::move(latency)},
           {"time", wall_seconds()}};
    if (steps_ > 0) {
      const auto n = static_cast<double>(steps_);
      s["step_time"] = step_seconds_ / n;
      s["comm_share"] = step_seconds_ > 0 ? wait_seconds_ / step_seconds_ : 0.0;
      s["samples_per_sec"] = step_seconds_ > 0 ? samples_ / step_seconds_ : 0.0;
      s["breakdown"] = {{"data_s", data_seconds_ / n},
                        {"compute_s", compute_seconds_ / n},
                        {"sync_s", wait_seconds_ / n}};
    }
    if (!busy_.empty()) {
      s["busy"] = {{"first_step", busy_last_ - static_cast<int64_t>(busy_.size()) + 1},
                   {"us", std::vector<int64_t>(busy_.begin(), busy_.end())}};
      // The next record repeats the last window of this one.
      while (busy_.size() > window_) busy_.pop_front();
    }
    report_(s);
    last_ = Clock::now();
    steps_ = 0;
    step_seconds_ = wait_seconds_ = data_seconds_ = compute_seconds_ = 0;
    samples_ = 0;
  }

 private:
  static json histogram_json(const LatencyHistogram& h) {
    json counts = json::array();
    for (size_t i = 0; i < LatencyHistogram::kBuckets; ++i) counts.push_back(h.bucket(i));
    return {{"counts", std::move(counts)}, {"sum", h.sum()}};
  }

  std::function<void(const json&)> report_;
  const comm::FlightRecorder& recorder_;
  LatencyHistogram wait_hist_;
  Clock::time_point last_ = Clock::now();
  int64_t steps_ = 0, samples_ = 0;
  double step_seconds_ = 0, wait_seconds_ = 0, data_seconds_ = 0, compute_seconds_ = 0;
  size_t window_;
  static constexpr size_t kMaxBusy = 4096;
  std::deque<int64_t> busy_;  // microseconds
  int64_t busy_last_ = -1;
};

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

}  // namespace

static compress::CompressionOptions compression_options(const JobConfig& cfg) {
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

json train(TrainerContext& ctx) {
  const JobConfig& cfg = ctx.config;
  const int job_rank = ctx.agent.rank();
  torch::set_num_threads(static_cast<int>(cfg.threads_per_worker));
  std::shared_ptr<comm::FlightRecorder> recorder_owner =
      ctx.recorder ? ctx.recorder : std::make_shared<comm::FlightRecorder>(job_rank);
  comm::FlightRecorder& recorder = *recorder_owner;
  recorder.set_activity(0, comm::Phase::Setup);
  FaultInjector faults(cfg.faults, job_rank);
  std::unique_ptr<trace::Tracer> tracer;
  // The recorder must stop calling the tracer before the tracer goes.
  struct ObserverGuard {
    comm::FlightRecorder& r;
    ~ObserverGuard() { r.set_observer(nullptr); }
  } observer_guard{recorder};
  auto phase = [&](int64_t step, comm::Phase p) {
    recorder.set_activity(step, p);
    if (tracer) tracer->phase(step, p);
  };

  auto t_load = Clock::now();
  Dataset train_set = load_dataset(cfg.data, Split::Train, cfg.train.seed);
  Dataset test_set = load_dataset(cfg.data, Split::Test, cfg.train.seed);
  spdlog::info("loaded {} training and {} test examples in {:.1f} s", train_set.size(),
               test_set.size(), seconds_since(t_load));

  ModelPtr model = make_model(cfg.model, input_spec(cfg.data), cfg.train.seed);
  auto optimizer = make_optimizer(cfg.train.optimizer, model->parameters());
  const int64_t snapshot_every = cfg.elastic.snapshot_every_steps;
  const int64_t max_steps =
      cfg.train.max_steps > 0 ? cfg.train.max_steps : std::numeric_limits<int64_t>::max();

  TrainState state;
  std::deque<Snapshot> snapshots;  // the newest last; at most two
  double snapshot_s = 0;           // time spent taking in-memory snapshots
  // Where training stands, as a snapshot or a checkpoint records it.
  auto position = [&](int world) {
    return CheckpointMeta{.step = state.step,
                          .epoch = state.epoch,
                          .consumed = state.consumed,
                          .world_size = world,
                          .seed = cfg.train.seed,
                          .job = cfg.name,
                          .time = wall_seconds()};
  };
  auto take_snapshot = [&](int world) {
    auto t = Clock::now();
    Snapshot snap{state, encode_checkpoint(position(world), *model, optimizer.get())};
    if (!snapshots.empty() && snapshots.back().state.step == state.step) {
      snapshots.back() = std::move(snap);
    } else {
      snapshots.push_back(std::move(snap));
      if (snapshots.size() > 2) snapshots.pop_front();
    }
    snapshot_s += seconds_since(t);
  };

  std::unique_ptr<CheckpointDir> checkpoints;
  if (!ctx.run_dir.empty()) {
    checkpoints = std::make_unique<CheckpointDir>(
        std::filesystem::path(ctx.run_dir) / "checkpoints", cfg.checkpoint.keep);
  }

  // The workers of the start hold the seed's initial state; a replacement receives it.
  elastic::Membership membership = ctx.agent.join();
  bool fresh_start = membership.epoch == 0;
  bool have_state = false;
  if (fresh_start && ctx.resume_from.empty()) {
    // Every worker of the start built the same model from the seed: a failure before the first
    // commit restores this.
    take_snapshot(static_cast<int>(membership.members.size()));
    have_state = true;
  }
  int64_t resumed_from = 0;
  int restores = 0;

  double compute_s = 0, data_s = 0, comm_s = 0, last_loss = 0;
  uint64_t comm_bytes = 0;
  // Gradient exchange only, summed over membership epochs (see DdpStats).
  uint64_t grad_sent = 0, grad_received = 0, grad_uncompressed = 0;
  StatusReporter status(ctx, recorder, static_cast<size_t>(cfg.debug.straggler_window));
  // Where each step went, for stragglers and `cohort diagnose` (trace/step_log.h).
  std::unique_ptr<trace::StepLog> step_log;
  if (!ctx.run_dir.empty()) {
    step_log = std::make_unique<trace::StepLog>((std::filesystem::path(ctx.run_dir) / "steps" /
                                                 ("rank-" + std::to_string(job_rank) + ".jsonl"))
                                                    .string());
  }
  int64_t clock_offset_us = 0;
  std::optional<trace::RankHeader> probe;  // the transport probe (the header of the step log)
  int64_t samples = 0;
  // Training time starts at this process's first step, as PyTorch's does after its barrier:
  // rendezvous, the initial broadcast, the transport probe and a restore are not in it.
  std::optional<Clock::time_point> t_train;
  double train_s = 0;
  // Periodic evaluation (train.eval_every_steps): its time is not training time. The newest result
  // is kept so that a job stopped by train.stop_at_accuracy does not evaluate the same model twice.
  double eval_s = 0;
  auto train_seconds = [&] { return t_train ? seconds_since(*t_train) - eval_s : 0.0; };
  bool reached = false;
  std::optional<std::pair<int64_t, Evaluation>> newest_eval;

  for (;;) {
    std::string leave_reason;
    try {
      comm::Communicator& comm = ctx.agent.connect(membership);
      const int rank = comm.rank(), world = comm.size();
      log::set_context(job_rank, membership.epoch, state.step);
      // Clock offsets are measured by the workers of the start together; a replacement that
      // joins later keeps its own clock.
      if (fresh_start && membership.epoch == 0) clock_offset_us = trace::measure_clock_offset(comm);
      if (cfg.trace.enabled && !tracer && !ctx.run_dir.empty()) {
        const int64_t offset = clock_offset_us;
        tracer = std::make_unique<trace::Tracer>(
            trace::TracerOptions{.path = (std::filesystem::path(ctx.run_dir) / "trace" /
                                          ("rank-" + std::to_string(job_rank) + ".json"))
                                             .string(),
                                 .rank = job_rank,
                                 .max_pending = static_cast<size_t>(cfg.trace.max_pending_events),
                                 .clock_offset_us = offset});
        recorder.set_observer(tracer.get());
      }
      ddp::DistributedDataParallel ddp(
          model, comm,
          {.bucket_bytes = static_cast<size_t>(cfg.comm.bucket_mb * (1 << 20)),
           .algorithm = comm::parse_algorithm(cfg.comm.algorithm),
           .broadcast_on_construct = false,
           .buffers = ddp::parse_buffer_sync(cfg.comm.buffers),
           .compression = compression_options(cfg),
           .on_bucket_ready = [&](size_t bucket, size_t bytes) {
             if (tracer) tracer->instant("bucket " + std::to_string(bucket) + " ready", bytes);
           }});
      // Bytes sent by this process over all its communicators.
      const uint64_t bytes_before = comm_bytes, bytes_at_connect = comm.stats().bytes_sent;
      auto count_bytes = [&] {
        comm_bytes = bytes_before + comm.stats().bytes_sent - bytes_at_connect;
      };
      bool report_recovery = false;
      int64_t restored_step = 0, rolled_back = 0;

      if (fresh_start) {
        fresh_start = false;
        ddp.broadcast_parameters(0);
        const trace::RankHeader header =
            probe_transport(comm, cfg.debug.bandwidth_probe_mb,
                            comm::parse_algorithm(cfg.comm.algorithm), job_rank, clock_offset_us);
        if (header.probe_bytes > 0) {
          spdlog::info(
              "transport probe: allreduce of {:.1f} MB in {:.2f} ms, {:.2f} GB/s bus bandwidth",
              static_cast<double>(header.probe_bytes) / 1e6, 1e3 * header.probe_seconds,
              header.probe_busbw_gbps);
        }
        probe = header;
        if (step_log) step_log->header(header);
        if (!ctx.resume_from.empty()) {
          // Rank 0 picks and reads the checkpoint; every rank restores the same bytes.
          std::string bytes, name;
          if (rank == 0) {
            CheckpointDir dir(ctx.resume_from, cfg.checkpoint.keep);
            std::vector<std::string> skipped;
            auto newest = dir.newest_valid(&skipped);  // logs each corrupt checkpoint it skips
            if (!newest) {
              throw Error("no valid checkpoint to resume from in " + ctx.resume_from +
                          (skipped.empty() ? ""
                                           : " (" + std::to_string(skipped.size()) +
                                                 " corrupt: " + skipped.front() + ")"));
            }
            name = newest->path.string();
            bytes = read_file(newest->path);
            if (ctx.report_event) {
              ctx.report_event({{"event", "resumed_from_checkpoint"},
                                {"path", name},
                                {"step", newest->step},
                                {"skipped", skipped}});
            }
          }
          name = ddp.broadcast_bytes(name);
          bytes = ddp.broadcast_bytes(bytes);
          std::vector<std::string> codec_states;
          CheckpointMeta pos =
              decode_checkpoint(bytes, name, *model, optimizer.get(), true, &codec_states);
          restore_codec_state(ddp, codec_states, rank, world, name);
          state.step = resumed_from = pos.step;
          state.epoch = pos.epoch;
          state.consumed = pos.consumed;
          spdlog::info("resumed from {} at step {} (epoch {}, {} samples consumed)", name, pos.step,
                       pos.epoch, pos.consumed);
        }
        take_snapshot(world);
        have_state = true;
      } else {
        if (step_log && !probe) {
          probe = trace::RankHeader{.rank = job_rank, .world = world};
          step_log->header(*probe);
        }
        // Agree on the newest snapshot every rank that has state holds, and who sends it to the
        // ranks without: min over ranks of (newest snapshot, -steps reached, -needs state, rank).
        constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
        int64_t v[4] = {have_state ? snapshots.back().state.step : kNone, -state.step,
                        have_state ? 0 : -1, have_state ? rank : kNone};
        comm.allreduce(Buffer{DType::I64, v, 4}, {.op = comm::ReduceOp::Min})->wait();
        if (v[0] == kNone) {
          throw Error("membership epoch " + std::to_string(membership.epoch) +
                      ": no member holds the training state (every worker that had it was lost)");
        }
        restored_step = v[0];
        const int root = static_cast<int>(v[3]);
        std::string bytes, state_json;
        if (have_state) {
          auto it = std::find_if(snapshots.begin(), snapshots.end(),
                                 [&](const Snapshot& s) { return s.state.step == restored_step; });
          if (it == snapshots.end()) {
            throw Error("rank " + std::to_string(job_rank) + " holds no snapshot of step " +
                        std::to_string(restored_step) + " (its newest is of step " +
                        std::to_string(snapshots.back().state.step) + ")");
          }
          bytes = it->bytes;
          state_json = it->state.to_json().dump();
        }
        if (v[2] < 0) {
          bytes = ddp.broadcast_bytes(rank == root ? bytes : std::string(), root);
          state_json = ddp.broadcast_bytes(rank == root ? state_json : std::string(), root);
        }
        rolled_back = std::max<int64_t>(0, -v[1] - restored_step);
        decode_checkpoint(bytes, "snapshot of step " + std::to_string(restored_step), *model,
                          optimizer.get());
        state = TrainState::from_json(json::parse(state_json));
        snapshots.clear();
        snapshots.push_back({state, std::move(bytes)});
        have_state = true;
        ++restores;
        report_recovery = rank == 0;
        spdlog::info(
            "membership epoch {}: {} workers; restored the snapshot of step {} (epoch {}, {} "
            "samples consumed), {} steps rolled back{}",
            membership.epoch, world, restored_step, state.epoch, state.consumed, rolled_back,
            v[2] < 0 ? ", state sent by rank " + std::to_string(root) : "");
      }
      auto recovery_done = [&] {
        if (!report_recovery) return;
        report_recovery = false;
        ctx.agent.report_recovered(membership, {{"restored_step", restored_step},
                                                {"steps_rolled_back", rolled_back},
                                                {"step", state.step},
                                                {"time", wall_seconds()}});
      };

      // Compression warm-up counts training steps: a resumed job does not warm up again.
      ddp.set_step(state.step);

      // A checkpoint of this step, written by rank 0. With gradient compression every rank's
      // codec state (residuals, PowerSGD's factors) goes with it, so that a resumed job continues
      // exactly: then every rank calls this at the same step.
      // `write`: whether rank 0 writes it (every rank gathers the codec states all the same, so
      // that whether they take part depends only on the step, which every rank shares).
      const bool compressed = compression_options(cfg).method != compress::Method::None;
      auto save_checkpoint_now = [&](bool write) {
        write = write && rank == 0 && checkpoints;
        if (!compressed && !write) return;
        phase(state.step, comm::Phase::Checkpoint);
        auto t = Clock::now();
        std::vector<std::string> codec_states;
        if (compressed) codec_states = ddp.gather_bytes(ddp.codec_state());
        if (!write) return;
        auto path = checkpoints->save(position(world), *model, optimizer.get(), codec_states);
        spdlog::info("checkpoint {} written in {:.2f} s", path.string(), seconds_since(t));
      };

      DistributedSampler sampler({.dataset_size = train_set.size(),
                                  .world_size = world,
                                  .rank = rank,
                                  .batch_size = cfg.train.batch_size,
                                  .seed = cfg.train.seed,
                                  .drop_last = cfg.train.drop_last});
      // The peak learning rate follows the world size when lr_schedule.scaling is linear.
      LrSchedule schedule(cfg.train.optimizer, cfg.train.lr_schedule, world);
      int64_t total_steps = state.step;
      if (state.epoch < cfg.train.epochs) {
        sampler.reset(state.epoch, state.consumed);
        total_steps += sampler.steps_remaining() +
                       (cfg.train.epochs - state.epoch - 1) * sampler.steps_per_epoch();
      }
      total_steps = std::min(total_steps, max_steps);

      // Commit: add up the samples trained since the last commit and take a snapshot. Returns
      // whether any rank saw a request for the next membership epoch, which every rank then
      // leaves together (after this step's checkpoint, if it has one).
      EpochCount pending;
      int64_t pending_epoch = state.epoch;
      auto commit = [&](bool may_switch) {
        double v[4] = {pending.samples, pending.id_sum, pending.id_sq_sum,
                       ctx.agent.change_requested() ? 1.0 : 0.0};
        comm.allreduce(Buffer{DType::F64, v, 4}, {.op = comm::ReduceOp::Sum})->wait();
        if (state.counts.size() <= static_cast<size_t>(pending_epoch)) {
          state.counts.resize(static_cast<size_t>(pending_epoch) + 1);
        }
        auto& c = state.counts[static_cast<size_t>(pending_epoch)];
        c.samples += v[0];
        c.id_sum += v[1];
        c.id_sq_sum += v[2];
        pending = {};
        pending_epoch = state.epoch;
        take_snapshot(world);
        return may_switch && v[3] > 0;
      };

      auto t_window = Clock::now();
      int64_t window_steps = 0, window_samples = 0, window_correct = 0, window_seen = 0;
      double window_loss = 0;
      auto bytes_now = [&] { return bytes_before + comm.stats().bytes_sent - bytes_at_connect; };
      status.maybe_report("training", state.step, total_steps, state.epoch, bytes_now(), true);
      while (state.epoch < cfg.train.epochs && state.step < max_steps && !reached) {
        sampler.reset(state.epoch, state.consumed);
        pending_epoch = state.epoch;
        bool epoch_end = false;
        while (!epoch_end && state.step < max_steps && !reached) {
          phase(state.step + 1, comm::Phase::Data);
          faults.at_step(state.step, &comm);
          auto t0 = Clock::now();
          if (!t_train) t_train = t0;
          auto batch = sampler.next();
          if (!batch) break;
          auto [x, y] = train_set.batch(batch->indices);
          auto t1 = Clock::now();
          data_s += std::chrono::duration<double>(t1 - t0).count();

          phase(state.step + 1, comm::Phase::Forward);
          if (double slow = faults.slowdown(state.step); slow > 0) {
            std::this_thread::sleep_for(std::chrono::duration<double>(slow));
          }

          set_learning_rate(*optimizer, schedule.at(state.step));
          optimizer->zero_grad();
          auto logits = model->forward(x);
          auto loss_sum = torch::nn::functional::cross_entropy(
              logits, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
          // DDP averages over ranks: scale so the result is the mean over the global batch.
          auto loss =
              loss_sum * (static_cast<double>(world) / static_cast<double>(batch->global_batch));
          const ddp::DdpStats before = ddp.stats();
          const comm::CollectiveTotals coll_before = recorder.totals();
          phase(state.step + 1, comm::Phase::Backward);
          ddp.backward(loss);
          const int64_t synced_us = comm::now_us();
          const comm::CollectiveTotals coll = recorder.totals();
          phase(state.step + 1, comm::Phase::Optimizer);
          optimizer->step();
          const double waited = ddp.stats().wait_seconds - before.wait_seconds;
          const double step_data = std::chrono::duration<double>(t1 - t0).count();
          const double step_compute = seconds_since(t1) - waited;
          grad_sent += ddp.stats().bytes_sent - before.bytes_sent;
          grad_received += ddp.stats().bytes_received - before.bytes_received;
          grad_uncompressed += ddp.stats().uncompressed_bytes - before.uncompressed_bytes;
          compute_s += step_compute;
          comm_s += waited;
          if (step_log) {
            step_log->append({.step = state.step + 1,
                              .epoch = membership.epoch,
                              .world = world,
                              .end_us = comm::now_us(),
                              .data_s = step_data,
                              .compute_s = step_compute,
                              .sync_s = waited,
                              .ready_us = synced_us - static_cast<int64_t>(waited * 1e6),
                              .sent_bytes = coll.sent_bytes - coll_before.sent_bytes,
                              .collective_us = coll.active_us - coll_before.active_us,
                              .collective_wait_us = coll.wait_us - coll_before.wait_us});
          }
          window_correct += logits.argmax(1).eq(y).sum().item<int64_t>();
          window_seen += static_cast<int64_t>(batch->indices.size());

          ++state.step;
          if (cfg.debug.check_params_every > 0 && state.step % cfg.debug.check_params_every == 0) {
            ddp.check_parameters("step " + std::to_string(state.step));
          }
          const auto n = static_cast<int64_t>(batch->indices.size());
          samples += n;
          for (int64_t i : batch->indices) {
            const auto d = static_cast<double>(i);
            pending.samples += 1;
            pending.id_sum += d;
            pending.id_sq_sum += d * d;
          }
          if (n > 0) last_loss = loss_sum.item<double>() / static_cast<double>(n);
          window_loss += last_loss;
          ++window_steps;
          window_samples += batch->global_batch;
          log::set_step(state.step);
          recovery_done();
          status.step(state.step, step_data, step_compute, waited, n);
          status.maybe_report("training", state.step, total_steps, state.epoch, bytes_now());

          epoch_end = sampler.steps_remaining() == 0;
          state.epoch = epoch_end ? state.epoch + 1 : state.epoch;
          state.consumed = epoch_end ? 0 : sampler.consumed();
          const bool evaluate_now =
              cfg.train.eval_every_steps > 0 && state.step % cfg.train.eval_every_steps == 0;
          if (evaluate_now) {
            phase(state.step, comm::Phase::Evaluate);
            auto t_eval = Clock::now();
            newest_eval.emplace(state.step, evaluate(*model, test_set, comm));
            const auto spent = Clock::now() - t_eval;
            eval_s += std::chrono::duration<double>(spent).count();
            t_window += spent;
            // Every rank has the same allreduced accuracy, so all of them stop at the same step.
            reached = cfg.train.stop_at_accuracy > 0 &&
                      newest_eval->second.accuracy >= cfg.train.stop_at_accuracy;
          }
          const bool last = state.step >= total_steps || state.epoch >= cfg.train.epochs || reached;
          if (rank == 0 && ctx.report_progress &&
              (state.step % cfg.train.log_every_steps == 0 || last || epoch_end || evaluate_now)) {
            double dt = seconds_since(t_window);
            double accuracy =
                window_seen > 0 ? static_cast<double>(window_correct) / window_seen : 0;
            json record{{"step", state.step},
                        {"total_steps", total_steps},
                        {"epoch", pending_epoch},
                        {"epochs", cfg.train.epochs},
                        {"loss", window_loss / window_steps},
                        {"accuracy", accuracy},
                        {"lr", learning_rate(*optimizer)},
                        {"samples_per_sec", dt > 0 ? window_samples / dt : 0.0},
                        {"steps_per_sec", dt > 0 ? window_steps / dt : 0.0},
                        {"world_size", world},
                        {"time", wall_seconds()}};
            if (evaluate_now) {
              record["test_accuracy"] = newest_eval->second.accuracy;
              record["test_loss"] = newest_eval->second.loss;
              record["train_seconds"] = train_seconds();
            }
            ctx.report_progress(record);
            t_window = Clock::now();
            window_steps = window_samples = window_correct = window_seen = 0;
            window_loss = 0;
          }
          bool leave_epoch = false;
          if (epoch_end || last || state.step >= max_steps || state.step % snapshot_every == 0) {
            count_bytes();
            leave_epoch = commit(/*may_switch=*/!last);
          }
          if (cfg.checkpoint.every_steps > 0 && state.step % cfg.checkpoint.every_steps == 0) {
            save_checkpoint_now(/*write=*/true);
          }
          if (leave_epoch) throw MembershipSwitch{};
        }
      }
      train_s = train_seconds();
      // The last step's, unless it has one already; not written when nothing was trained since
      // the resume (resumed_from is the original workers' alone, so it decides only the write).
      if (cfg.checkpoint.every_steps > 0 && state.step % cfg.checkpoint.every_steps != 0) {
        save_checkpoint_now(/*write=*/state.step > resumed_from);
      }

      status.maybe_report("evaluating", state.step, total_steps, state.epoch, bytes_now(), true);
      phase(state.step, comm::Phase::Evaluate);
      Evaluation ev = newest_eval && newest_eval->first == state.step
                          ? newest_eval->second
                          : evaluate(*model, test_set, comm);
      phase(state.step, comm::Phase::Done);
      recovery_done();
      count_bytes();
      json epoch_samples = json::array();
      for (size_t e = 0; e < state.counts.size(); ++e) {
        epoch_samples.push_back({{"epoch", e},
                                 {"samples", state.counts[e].samples},
                                 {"id_sum", state.counts[e].id_sum},
                                 {"id_sq_sum", state.counts[e].id_sq_sum}});
      }
      return json{
          {"rank", rank},
          {"job_rank", job_rank},
          {"membership_epoch", membership.epoch},
          {"world_size", world},
          {"steps", state.step},
          // Epochs trained: whole ones plus the part of the current one.
          {"epochs", static_cast<double>(state.epoch) + static_cast<double>(state.consumed) /
                                                            static_cast<double>(train_set.size())},
          {"samples", samples},
          {"train_seconds", train_s},
          {"compute_seconds", compute_s},
          {"comm_seconds", comm_s},
          {"data_seconds", data_s},
          {"snapshot_seconds", snapshot_s},
          {"eval_seconds", eval_s},
          {"comm_bytes", comm_bytes},
          // Gradient exchange only: what went on the wire, and what an uncompressed f32 ring
          // allreduce of the same buckets would have sent.
          {"grad_bytes_sent", grad_sent},
          {"grad_bytes_received", grad_received},
          {"grad_bytes_uncompressed", grad_uncompressed},
          {"compression", cfg.comm.compression},
          // The transport probe at start-up (trace/step_log.h; 0: none).
          {"probe_bytes", probe ? probe->probe_bytes : 0},
          {"probe_busbw_gbps", probe ? probe->probe_busbw_gbps : 0.0},
          {"test_accuracy", ev.accuracy},
          {"test_loss", ev.loss},
          {"final_loss", last_loss},
          {"parameter_digest", ddp.parameter_digest()},
          {"buffer_digest", ddp.buffer_digest()},
          {"resumed_from_step", resumed_from},
          {"restores", restores},
          {"epoch_samples", epoch_samples}};
    } catch (const MembershipSwitch&) {
      leave_reason = "";  // a graceful switch: nothing in flight
      spdlog::info("leaving membership epoch {} at step {}: a worker joins", membership.epoch,
                   state.step);
    } catch (const Error& e) {
      if (!is_membership_failure(e)) throw;
      leave_reason = e.what();
      spdlog::warn("leaving membership epoch {} at step {}: {}", membership.epoch, state.step,
                   e.what());
    }
    ctx.agent.disconnect(leave_reason);
    membership = ctx.agent.rejoin(
        membership,
        {{"step", state.step}, {"snapshot_step", have_state ? snapshots.back().state.step : -1}});
  }
}

}  // namespace cohort::train
