// Synchronization modes (sync.mode), end to end: `cohort run` jobs of real worker processes over
// real sockets, whose final checkpoints are compared tensor by tensor.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cohort/base/file.h"
#include "cohort/train/checkpoint.h"
#include "cohort/train/config.h"
#include "cohort/train/models.h"
#include "sync_jobs.h"

namespace cohort::train {
namespace {

using namespace testing;

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

// An evaluation and a checkpoint in the middle of a period average the replicas plainly: the
// outer optimizer steps only at the period's averages (3 in 12 steps of period 4), from the anchor
// of the last one, which the checkpoint keeps, so a job resumed from it trains what the job that
// went on trained. (No inner momentum: a resumed job gives every rank rank 0's optimizer state.)
TEST(SyncModes, AnAverageMidPeriodTakesNoOuterStepAndAResumeKeepsTheAnchor) {
  const std::vector<std::string> job = {
      "sync.mode=local_sgd",        "sync.period=4",
      "train.optimizer.momentum=0", "sync.outer_optimizer={name: nesterov, lr: 0.7, momentum: 0.9}",
      "checkpoint.every_steps=6",   "train.eval_every_steps=6"};
  const fs::path whole = run_job("outer-whole", 12, job);
  const json s = read_json(whole / "summary.json");
  EXPECT_EQ(s["per_rank"][0]["outer_steps"], 3) << s.dump(2);
  EXPECT_EQ(s["per_rank"][0]["averagings"], 4) << s.dump(2);  // and the one before step 6's
  const fs::path half = run_job("outer-half", 6, job);
  const e2e::Result r = e2e::sh(
      std::string(COHORT_BINARY) + " run --resume " + half.string() + " --set train.max_steps=12",
      300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(max_relative_difference(final_state(whole), final_state(half)), 0.0);
  for (const auto& d : {whole, half}) fs::remove_all(d);
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

// sync.balance: auto with a worker that is three times slower than it is: it trains well under
// half of the epoch's samples (a quarter if the balance were exact), every sample of the epoch is
// still trained on once, and the replicas still agree. (The share after the last commit is one
// measurement of a few steps, which a busy host can swing: the samples each rank trained over
// the whole epoch are what the balance gave.)
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
  EXPECT_EQ(slow["balance_shares"], fast["balance_shares"]);
  const double slow_samples = slow["samples"].get<double>();
  EXPECT_LT(slow_samples / (slow_samples + fast["samples"].get<double>()), 0.42) << s.dump(2);
  expect_one_epoch_each_sample_once(s);
  EXPECT_EQ(fast["parameter_digest"], slow["parameter_digest"]);
  EXPECT_GE(s["test_accuracy"].get<double>(), 0.8) << s.dump(2);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace cohort::train
