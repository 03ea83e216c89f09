// Synchronization modes (sync.mode), end to end: `cohort run` jobs of real worker processes over
// real sockets, whose final checkpoints are compared tensor by tensor.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../e2e/files.h"
#include "../e2e/shell.h"
#include "cohort/base/file.h"
#include "cohort/train/checkpoint.h"
#include "cohort/train/config.h"
#include "cohort/train/models.h"

namespace cohort::train {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

// Two MLP workers for `steps` steps of SGD with momentum, with a checkpoint at the end.
//
// Runs of two modes that are equal in exact arithmetic are compared over a few steps only: early
// training at this learning rate amplifies a rounding difference once a ReLU's input crosses zero
// in one run and not in the other (two such runs were 3e-8 apart after 22 steps, 6e-6 after 23).
// `cohort run` of the MLP example in `dir` with --set for each of `sets`; its output.
e2e::Result run_mlp(const fs::path& dir, const std::vector<std::string>& sets) {
  std::string cmd = std::string(COHORT_BINARY) + " run " + COHORT_SOURCE_DIR +
                    "/examples/fashion-mlp.yaml --run-dir " + dir.string();
  for (const auto& s : sets) cmd += " --set '" + s + "'";
  return e2e::sh(cmd, 300);
}

fs::path run_job(const std::string& name, int steps, const std::vector<std::string>& sets) {
  const fs::path dir = e2e::fresh_dir("sync", name);
  std::vector<std::string> all = {"workers=2", "train.max_steps=" + std::to_string(steps),
                                  "checkpoint.every_steps=" + std::to_string(steps),
                                  "train.optimizer.momentum=0.9", "train.seed=3"};
  all.insert(all.end(), sets.begin(), sets.end());
  const e2e::Result r = run_mlp(dir, all);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return dir;
}

struct Final {
  std::vector<torch::Tensor> parameters;
  CheckpointExtras extras;
};

Final final_state(const fs::path& dir) {
  CheckpointDir ckpts(dir / "checkpoints", 3);
  auto newest = ckpts.newest_valid();
  if (!newest) throw Error("no checkpoint in " + dir.string());
  ModelPtr model = make_model(ModelConfig{.name = ModelKind::Mlp}, {{1, 28, 28}, 10}, 0);
  Final f;
  decode_checkpoint(read_file(newest->path), newest->path.string(), *model, nullptr,
                    /*restore_rng=*/false, &f.extras);
  for (const auto& p : model->parameters()) f.parameters.push_back(p.detach().clone());
  return f;
}

// One epoch of Fashion-MNIST's 60000 examples, each trained on once: the count, the sum and the
// sum of squares of the example indices are those of [0, 60000).
void expect_one_epoch_each_sample_once(const json& s) {
  const double n = 60000;
  ASSERT_EQ(s["epoch_samples"].size(), 1u) << s.dump(2);
  EXPECT_EQ(s["epoch_samples"][0]["samples"].get<double>(), n);
  EXPECT_EQ(s["epoch_samples"][0]["id_sum"].get<double>(), n * (n - 1) / 2);
  EXPECT_EQ(s["epoch_samples"][0]["id_sq_sum"].get<double>(), (n - 1) * n * (2 * n - 1) / 6);
}

// The largest |a - b| / (|a| + 1e-3) over every element of every parameter.
double max_relative_difference(const Final& a, const Final& b) {
  double worst = 0;
  for (size_t i = 0; i < a.parameters.size(); ++i) {
    auto d = (a.parameters[i] - b.parameters[i]).abs() / (a.parameters[i].abs() + 1e-3);
    worst = std::max(worst, d.max().item<double>());
  }
  return worst;
}

// SGD with momentum is linear in the gradients: averaging the replicas after each local step
// gives the synchronous step, so period 1 is allreduce to float rounding, and a longer period is
// not (which shows that the comparison tells the modes apart).
TEST(SyncModes, LocalSgdWithPeriodOneGivesTheParametersOfAllReduce) {
  const fs::path sync = run_job("allreduce", 20, {});
  const fs::path local1 = run_job("local1", 20, {"sync.mode=local_sgd", "sync.period=1"});
  const fs::path local4 = run_job("local4", 20, {"sync.mode=local_sgd", "sync.period=4"});
  const Final a = final_state(sync), b = final_state(local1), c = final_state(local4);
  EXPECT_LT(max_relative_difference(a, b), 1e-4);
  EXPECT_GT(max_relative_difference(a, c), 1e-2);

  const json s1 = read_json(local1 / "summary.json"), s4 = read_json(local4 / "summary.json");
  for (const json* s : {&s1, &s4}) {
    EXPECT_EQ((*s)["status"], "completed") << s->dump(2);
    // Every job ends with the replicas averaged: they hold the same model.
    EXPECT_EQ((*s)["per_rank"][0]["parameter_digest"], (*s)["per_rank"][1]["parameter_digest"]);
    EXPECT_EQ((*s)["per_rank"][0]["sync_mode"], "local_sgd");
  }
  EXPECT_EQ(s1["per_rank"][0]["averagings"], 20) << s1.dump(2);
  EXPECT_EQ(s4["per_rank"][0]["averagings"], 5) << s4.dump(2);
  EXPECT_EQ(s4["per_rank"][0]["local_steps"], 20) << s4.dump(2);
  // One model allreduce per period instead of one gradient allreduce per step.
  const double bytes_sync = read_json(sync / "summary.json")["per_rank"][0]["grad_bytes_sent"];
  const double bytes_local4 = s4["per_rank"][0]["grad_bytes_sent"];
  EXPECT_NEAR(bytes_local4 / bytes_sync, 0.25, 0.02);
  for (const auto& d : {sync, local1, local4}) fs::remove_all(d);
}

// An outer SGD step with learning rate 1 and no momentum lands on the average itself; Nesterov
// momentum does not, and its momentum goes into the checkpoint.
TEST(SyncModes, TheOuterOptimizerAppliesTheAveragedUpdate) {
  const std::vector<std::string> local = {"sync.mode=local_sgd", "sync.period=4"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), local.begin(), local.end());
    return more;
  };
  const fs::path plain = run_job("plain", 12, local);
  const fs::path unit =
      run_job("outer-unit", 12, with({"sync.outer_optimizer={name: sgd, lr: 1, momentum: 0}"}));
  const fs::path nesterov =
      run_job("outer-nesterov", 12,
              with({"sync.outer_optimizer={name: nesterov, lr: 0.7, momentum: 0.9}"}));
  const Final p = final_state(plain), u = final_state(unit), n = final_state(nesterov);
  EXPECT_LT(max_relative_difference(p, u), 1e-4);
  EXPECT_GT(max_relative_difference(p, n), 1e-2);
  EXPECT_TRUE(p.extras.sync_state.empty());
  EXPECT_FALSE(n.extras.sync_state.empty());
  const json s = read_json(nesterov / "summary.json");
  EXPECT_EQ(s["per_rank"][0]["parameter_digest"], s["per_rank"][1]["parameter_digest"]);
  for (const auto& d : {plain, unit, nesterov}) fs::remove_all(d);
}

// A worker killed mid-period: the survivors go back to the last average (a commit), a
// replacement joins, every sample of the epoch is trained on once, the replicas agree at the end.
TEST(SyncModes, LocalSgdLosesAtMostThePeriodWhenAWorkerDies) {
  const fs::path dir = e2e::fresh_dir("sync", "kill");
  const e2e::Result r = run_mlp(
      dir, {"workers=3", "train.epochs=1", "checkpoint.every_steps=0", "sync.mode=local_sgd",
            "sync.period=8", "sync.warmup_steps=10", "elastic.max_restarts=1",
            "elastic.min_workers=2", "elastic.heartbeat_s=0.2", "elastic.failure_timeout_s=2",
            "elastic.snapshot_every_steps=100", "faults=[{kind: kill, rank: 1, at_step: 45}]"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json s = read_json(dir / "summary.json");
  EXPECT_EQ(s["status"], "completed") << s.dump(2);
  EXPECT_EQ(s["restarts"], 1) << s.dump(2);
  expect_one_epoch_each_sample_once(s);
  for (const auto& rank : s["per_rank"]) {
    EXPECT_EQ(rank["parameter_digest"], s["per_rank"][0]["parameter_digest"]);
  }
  EXPECT_GE(s["test_accuracy"].get<double>(), 0.8) << s.dump(2);
  // Recovery went back to the average of step 42 (10 synchronous steps, then one every 8), not
  // to the last elastic.snapshot_every_steps.
  bool recovered = false;
  std::ifstream events(dir / "events.jsonl");
  for (std::string line; std::getline(events, line);) {
    const json e = json::parse(line);
    if (e.value("event", "") != "recovered") continue;
    recovered = true;
    EXPECT_EQ(e["restored_step"], 42) << e.dump();
    EXPECT_LE(e["steps_rolled_back"].get<int>(), 8) << e.dump();
  }
  EXPECT_TRUE(recovered) << r.output;
  fs::remove_all(dir);
}

// sync.balance: auto with a worker that is three times slower than it is: its share of the
// global batch falls to about a third of the other's, every sample of the epoch is still trained
// on once, and the replicas still agree.
TEST(SyncModes, BalanceGivesAPersistentStragglerASmallerShare) {
  const fs::path dir = e2e::fresh_dir("sync", "balance");
  const e2e::Result r =
      run_mlp(dir, {"workers=2", "train.epochs=1", "checkpoint.every_steps=0", "sync.balance=auto",
                    "faults=[{kind: slow, rank: 1, at_step: 0, factor: 3}]"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json s = read_json(dir / "summary.json");
  ASSERT_EQ(s["per_rank"].size(), 2u) << s.dump(2);
  const json& fast = s["per_rank"][0];
  const json& slow = s["per_rank"][1];
  EXPECT_LT(slow["balance_shares"][1].get<double>(), 0.42) << s.dump(2);
  EXPECT_EQ(slow["balance_shares"], fast["balance_shares"]);
  EXPECT_LT(slow["samples"].get<double>(), 0.75 * fast["samples"].get<double>()) << s.dump(2);
  expect_one_epoch_each_sample_once(s);
  EXPECT_EQ(fast["parameter_digest"], slow["parameter_digest"]);
  EXPECT_GE(s["test_accuracy"].get<double>(), 0.8) << s.dump(2);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace cohort::train
