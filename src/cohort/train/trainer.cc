#include "cohort/train/trainer.h"

#include <torch/torch.h>

#include <filesystem>

#include "cohort/base/clock.h"
#include "cohort/base/file.h"
#include "cohort/base/log.h"
#include "cohort/ddp/distributed_data_parallel.h"
#include "cohort/train/checkpoint.h"
#include "cohort/train/dataset.h"
#include "cohort/train/models.h"
#include "cohort/train/sampler.h"
#include "cohort/train/schedule.h"

namespace cohort::train {

using nlohmann::json;

namespace {

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
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
    sums[2] += torch::nn::functional::cross_entropy(
                   logits, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                   .item<double>();
  }
  comm.allreduce(Buffer{DType::F64, sums, 3}, {.op = comm::ReduceOp::Sum})->wait();
  model.train();
  return {sums[1] > 0 ? sums[0] / sums[1] : 0, sums[1] > 0 ? sums[2] / sums[1] : 0};
}

}  // namespace

json train(TrainerContext& ctx) {
  const JobConfig& cfg = ctx.config;
  const int rank = ctx.comm.rank(), world = ctx.comm.size();
  torch::set_num_threads(static_cast<int>(cfg.threads_per_worker));

  auto t_load = Clock::now();
  Dataset train_set = load_dataset(cfg.data, Split::Train, cfg.train.seed);
  Dataset test_set = load_dataset(cfg.data, Split::Test, cfg.train.seed);
  spdlog::info("loaded {} training and {} test examples in {:.1f} s", train_set.size(),
               test_set.size(), seconds_since(t_load));

  ModelPtr model = make_model(cfg.model, input_spec(cfg.data), cfg.train.seed);
  ddp::DistributedDataParallel ddp(
      model, ctx.comm,
      {.bucket_bytes = static_cast<size_t>(cfg.comm.bucket_mb * (1 << 20)),
       .algorithm = comm::parse_algorithm(cfg.comm.algorithm)});
  auto optimizer = make_optimizer(cfg.train.optimizer, model->parameters());
  LrSchedule schedule(cfg.train.optimizer, cfg.train.lr_schedule, world);

  DistributedSampler sampler({.dataset_size = train_set.size(),
                              .world_size = world,
                              .rank = rank,
                              .batch_size = cfg.train.batch_size,
                              .seed = cfg.train.seed,
                              .drop_last = cfg.train.drop_last});
  CheckpointMeta pos;  // where training starts: step, epoch, consumed
  if (!ctx.resume_from.empty()) {
    // Rank 0 picks and reads the checkpoint; every rank restores the same bytes.
    std::string bytes, name;
    if (rank == 0) {
      CheckpointDir dir(ctx.resume_from, cfg.checkpoint.keep);
      auto newest = dir.newest_valid();  // logs each corrupt checkpoint it skips
      if (!newest) throw Error("no valid checkpoint to resume from in " + ctx.resume_from);
      name = newest->path.string();
      bytes = read_file(newest->path);
    }
    name = ddp.broadcast_bytes(name);
    bytes = ddp.broadcast_bytes(bytes);
    pos = decode_checkpoint(bytes, name, *model, optimizer.get());
    spdlog::info("resumed from {} at step {} (epoch {}, {} samples consumed)", name, pos.step,
                 pos.epoch, pos.consumed);
  }

  const int64_t steps_per_epoch = sampler.steps_per_epoch();
  int64_t total_steps = steps_per_epoch * cfg.train.epochs;
  if (cfg.train.max_steps > 0) total_steps = std::min(total_steps, cfg.train.max_steps);

  std::unique_ptr<CheckpointDir> checkpoints;
  if (!ctx.run_dir.empty() && rank == 0) {
    checkpoints = std::make_unique<CheckpointDir>(std::filesystem::path(ctx.run_dir) / "checkpoints",
                                                  cfg.checkpoint.keep);
  }
  auto save = [&](int64_t step, int64_t epoch, int64_t consumed) {
    if (!checkpoints) return;
    auto t = Clock::now();
    auto path = checkpoints->save({.step = step,
                                   .epoch = epoch,
                                   .consumed = consumed,
                                   .world_size = world,
                                   .seed = cfg.train.seed,
                                   .job = cfg.name,
                                   .time = wall_seconds()},
                                  *model, optimizer.get());
    spdlog::info("checkpoint {} written in {:.2f} s", path.string(), seconds_since(t));
  };

  int64_t step = pos.step;
  double compute_s = 0, data_s = 0, last_loss = 0;
  int64_t samples = 0;
  auto t_train = Clock::now();
  auto t_window = Clock::now();
  int64_t window_steps = 0, window_samples = 0;
  double window_loss = 0;
  const double wait_before = ddp.stats().wait_seconds;
  const auto bytes_before = ctx.comm.stats().bytes_sent;
  // Position (epoch, consumed): where the next step begins. It is what a checkpoint stores.
  int64_t epoch = pos.epoch;
  int64_t consumed = pos.consumed;
  auto position_after_step = [&] {
    return sampler.steps_remaining() == 0 ? std::make_pair(epoch + 1, int64_t{0})
                                          : std::make_pair(epoch, sampler.consumed());
  };

  while (epoch < cfg.train.epochs && step < total_steps) {
    sampler.reset(epoch, consumed);
    while (step < total_steps) {
      auto t0 = Clock::now();
      auto batch = sampler.next();
      if (!batch) break;
      auto [x, y] = train_set.batch(batch->indices);
      auto t1 = Clock::now();
      data_s += std::chrono::duration<double>(t1 - t0).count();

      set_learning_rate(*optimizer, schedule.at(step));
      optimizer->zero_grad();
      auto logits = model->forward(x);
      auto loss_sum = torch::nn::functional::cross_entropy(
          logits, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
      // DDP averages over ranks: scale so the result is the mean over the global batch.
      auto loss = loss_sum * (static_cast<double>(world) / static_cast<double>(batch->global_batch));
      double wait0 = ddp.stats().wait_seconds;
      ddp.backward(loss);
      optimizer->step();
      compute_s += seconds_since(t1) - (ddp.stats().wait_seconds - wait0);

      ++step;
      const auto n = static_cast<int64_t>(batch->indices.size());
      samples += n;
      if (n > 0) last_loss = loss_sum.item<double>() / static_cast<double>(n);
      window_loss += last_loss;
      ++window_steps;
      window_samples += batch->global_batch;
      log::set_step(step);

      auto [next_epoch, next_consumed] = position_after_step();
      if (rank == 0 && ctx.report_progress &&
          (step % cfg.train.log_every_steps == 0 || step == total_steps || next_epoch != epoch)) {
        double dt = seconds_since(t_window);
        ctx.report_progress(json{{"step", step},
                                 {"total_steps", total_steps},
                                 {"epoch", epoch},
                                 {"epochs", cfg.train.epochs},
                                 {"loss", window_loss / window_steps},
                                 {"lr", learning_rate(*optimizer)},
                                 {"samples_per_sec", dt > 0 ? window_samples / dt : 0.0},
                                 {"steps_per_sec", dt > 0 ? window_steps / dt : 0.0},
                                 {"time", wall_seconds()}});
        t_window = Clock::now();
        window_steps = window_samples = 0;
        window_loss = 0;
      }
      if (cfg.checkpoint.every_steps > 0 && step % cfg.checkpoint.every_steps == 0) {
        save(step, next_epoch, next_consumed);
      }
    }
    std::tie(epoch, consumed) = position_after_step();
    if (consumed > 0) break;  // stopped by max_steps in the middle of an epoch
  }
  double train_s = seconds_since(t_train);
  if (cfg.checkpoint.every_steps > 0 && step > pos.step && step % cfg.checkpoint.every_steps != 0) {
    save(step, epoch, consumed);
  }

  Evaluation ev = evaluate(*model, test_set, ctx.comm);
  json summary{{"rank", rank},
               {"steps", step},
               {"epochs", static_cast<double>(step) / std::max<int64_t>(1, steps_per_epoch)},
               {"samples", samples},
               {"train_seconds", train_s},
               {"compute_seconds", compute_s},
               {"comm_seconds", ddp.stats().wait_seconds - wait_before},
               {"data_seconds", data_s},
               {"comm_bytes", ctx.comm.stats().bytes_sent - bytes_before},
               {"test_accuracy", ev.accuracy},
               {"test_loss", ev.loss},
               {"final_loss", last_loss},
               {"parameter_digest", ddp.parameter_digest()},
               {"resumed_from_step", pos.step}};
  return summary;
}

}  // namespace cohort::train
