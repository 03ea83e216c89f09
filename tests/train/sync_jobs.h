// Jobs of the synchronization-mode tests: `cohort run` of the MLP example with real worker
// processes over real sockets, and what their run directories hold.
#pragma once

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

namespace cohort::train::testing {

namespace fs = std::filesystem;
using nlohmann::json;

inline json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

// Two MLP workers for `steps` steps of SGD with momentum, with a checkpoint at the end.
//
// Runs of two modes that are equal in exact arithmetic are compared over a few steps only: early
// training at this learning rate amplifies a rounding difference once a ReLU's input crosses zero
// in one run and not in the other (two such runs were 3e-8 apart after 22 steps, 6e-6 after 23).
// `cohort run` of the MLP example in `dir` with --set for each of `sets`; its output.
inline e2e::Result run_mlp(const fs::path& dir, const std::vector<std::string>& sets) {
  std::string cmd = std::string(COHORT_BINARY) + " run " + COHORT_SOURCE_DIR +
                    "/examples/fashion-mlp.yaml --run-dir " + dir.string();
  for (const auto& s : sets) cmd += " --set '" + s + "'";
  return e2e::sh(cmd, 300);
}

inline fs::path run_job(const std::string& name, int steps, const std::vector<std::string>& sets) {
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

inline Final final_state(const fs::path& dir) {
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
inline void expect_one_epoch_each_sample_once(const json& s) {
  const double n = 60000;
  ASSERT_EQ(s["epoch_samples"].size(), 1u) << s.dump(2);
  EXPECT_EQ(s["epoch_samples"][0]["samples"].get<double>(), n);
  EXPECT_EQ(s["epoch_samples"][0]["id_sum"].get<double>(), n * (n - 1) / 2);
  EXPECT_EQ(s["epoch_samples"][0]["id_sq_sum"].get<double>(), (n - 1) * n * (2 * n - 1) / 6);
}

// The largest |a - b| / (|a| + 1e-3) over every element of every parameter.
inline double max_relative_difference(const Final& a, const Final& b) {
  double worst = 0;
  for (size_t i = 0; i < a.parameters.size(); ++i) {
    auto d = (a.parameters[i] - b.parameters[i]).abs() / (a.parameters[i].abs() + 1e-3);
    worst = std::max(worst, d.max().item<double>());
  }
  return worst;
}

}  // namespace cohort::train::testing
