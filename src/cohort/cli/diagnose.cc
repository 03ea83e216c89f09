// `cohort diagnose RUN_DIR [--json]`: where a run's steps went, per rank, and what to change
// (trace/diagnosis.h). Reads the run directory's config.yaml, steps/rank-N.jsonl, summary.json and
// hang-report.txt (the last two when present: a run that failed or is still running has no
// summary); prints the report (or its JSON) and writes RUN_DIR/diagnosis.json.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cohort/base/error.h"
#include "cohort/base/file.h"
#include "cohort/cli/args.h"
#include "cohort/cli/sim_job.h"
#include "cohort/sim/step.h"
#include "cohort/trace/diagnosis.h"
#include "cohort/train/config.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace cohort::cli {
namespace {

int usage(std::ostream& os, int code) {
  os << "usage: cohort diagnose RUN_DIR [--json] [--profile P]\n\n"
        "Where each rank's steps went (computing, loading data, waiting for other ranks,\n"
        "communicating), the bus bandwidth the gradient allreduces reached against the transport\n"
        "probe measured at start-up, stragglers, and what to change. Works on finished and failed\n"
        "runs; writes RUN_DIR/diagnosis.json. --json prints that instead of the report. With a\n"
        "profile (cohort calibrate; --profile, else ./profile.json) it also says what the model\n"
        "predicts for the run's configuration against what the run measured.\n";
  return code;
}

// The time between consecutive steps of the slowest rank (median, after its first 10 steps), the
// way bench-simulate measures a run; 0 when the run has too few steps.
double measured_step_s(const std::vector<trace::RankSteps>& ranks) {
  double worst = 0;
  for (const auto& r : ranks) {
    std::vector<double> gaps;
    for (size_t i = 11; i < r.steps.size(); ++i) {
      if (r.steps[i].epoch == r.steps[i - 1].epoch) {
        gaps.push_back((r.steps[i].end_us - r.steps[i - 1].end_us) * 1e-6);
      }
    }
    if (gaps.size() < 5) continue;
    std::nth_element(gaps.begin(), gaps.begin() + gaps.size() / 2, gaps.end());
    worst = std::max(worst, gaps[gaps.size() / 2]);
  }
  return worst;
}

// The model's line: its prediction for the run's configuration, all workers on this host.
json model_line(const train::JobConfig& cfg, const std::vector<trace::RankSteps>& ranks,
                const std::optional<std::string>& profile_path, std::string* text) {
  std::optional<sim::Profile> profile;
  try {
    profile = find_profile(profile_path);
  } catch (const std::exception& e) {
    *text = std::string("model: the profile cannot be read: ") + e.what();
    return {{"error", e.what()}};
  }
  if (!profile || !profile->has_compute) {
    *text =
        "model: no profile of this job (cohort calibrate JOB.yaml writes profile.json; then "
        "--profile or ./profile.json) to say how fast this run should have been";
    return nullptr;
  }
  const int workers = static_cast<int>(cfg.workers);
  sim::Prediction p;
  try {
    p = sim::simulate(*profile, {.workers = workers, .ranks_per_host = workers}, choice_of(cfg));
  } catch (const std::exception& e) {
    // The rest of the diagnosis stands without the model's line.
    *text = std::string("model: no prediction for this run: ") + e.what();
    return {{"error", e.what()}};
  }
  const double measured = measured_step_s(ranks);
  char line[512];
  if (measured > 0) {
    const double gap = measured / p.step_s - 1;
    std::snprintf(
        line, sizeof line,
        "model: %d worker%s on this host should take %.1f ms per step (profile %s); this run took "
        "%.1f ms, %.0f%% %s than predicted",
        workers, workers == 1 ? "" : "s", p.step_s * 1e3, profile->name.c_str(), measured * 1e3,
        std::abs(gap) * 100, gap >= 0 ? "slower" : "faster");
  } else {
    std::snprintf(line, sizeof line,
                  "model: %d worker%s on this host should take %.1f ms per step (profile %s)",
                  workers, workers == 1 ? "" : "s", p.step_s * 1e3, profile->name.c_str());
  }
  *text = line;
  return {{"profile", profile->name},
          {"predicted_step_s", p.step_s},
          {"predicted_exposed_comm_s", p.exposed_comm_s},
          {"measured_step_s", measured}};
}

}  // namespace

int diagnose_main(int argc, char** argv) {
  Args args(argc, argv, {"profile"}, {"help", "json"});
  if (args.has("help")) return usage(std::cout, 0);
  if (args.positionals().size() != 1) return usage(std::cerr, 2);
  const fs::path dir = args.positionals()[0];
  if (!fs::is_regular_file(dir / "config.yaml")) {
    throw ConfigError(dir.string() + ": not a run directory (no config.yaml)");
  }
  // The data set may live elsewhere now: the job's settings are all that is needed.
  const train::JobConfig cfg = train::load_job_config((dir / "config.yaml").string(),
                                                      {.overrides = {}, .check_paths = false});
  trace::JobFacts job{
      .name = cfg.name,
      .workers = cfg.workers,
      .threads_per_worker = cfg.threads_per_worker,
      .batch_size = cfg.train.batch_size,
      .model = std::string(train::model_kind_name(cfg.model.name)),
      .compression = cfg.comm.compression,
      .bucket_mb = cfg.comm.bucket_mb,
      .algorithm = cfg.comm.algorithm,
      .sync_mode = std::string(train::sync_kind_name(cfg.sync.mode)),
      .straggler = {.margin = cfg.debug.straggler_margin, .window = cfg.debug.straggler_window},
      .program = cfg.program.python};
  trace::RunOutcome outcome;
  if (fs::is_regular_file(dir / "summary.json")) {
    json s = json::parse(read_file(dir / "summary.json"));
    outcome.status = s.value("status", std::string());
    outcome.error = s.value("error", std::string());
  }
  if (fs::is_regular_file(dir / "hang-report.txt")) {
    outcome = trace::read_hang_report(read_file(dir / "hang-report.txt"), outcome);
  }
  const auto ranks = trace::read_step_logs(dir.string());
  if (ranks.empty() && outcome.hang_headline.empty() && outcome.error.empty()) {
    if (!cfg.program.python.empty()) {
      throw Error(dir.string() + ": the Python program (" + cfg.program.python +
                  ") recorded no steps: Cohort sees a step between two of its cohort.report() "
                  "calls on a group of the cohort backend, and it made no such reports");
    }
    throw Error(dir.string() + ": no steps/rank-N.jsonl (the run recorded no steps)");
  }
  const trace::Diagnosis d = trace::diagnose_run(ranks, job, outcome);
  json j = d.to_json();
  std::string model;
  if (cfg.program.python.empty()) j["model"] = model_line(cfg, ranks, args.get("profile"), &model);
  write_file_atomically(dir / "diagnosis.json", j.dump(2) + "\n");
  if (args.has("json")) {
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << d.text() << "\n";
    if (!model.empty()) std::cout << model << "\n";
    std::cout << "(written to " << (dir / "diagnosis.json").string() << ")\n";
  }
  return 0;
}

}  // namespace cohort::cli
