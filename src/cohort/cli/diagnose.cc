// `cohort diagnose RUN_DIR [--json]`: where a run's steps went, per rank, and what to change
// (trace/diagnosis.h). Reads the run directory's config.yaml, steps/rank-N.jsonl, summary.json and
// hang-report.txt (the last two when present: a run that failed or is still running has no
// summary); prints the report (or its JSON) and writes RUN_DIR/diagnosis.json.
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cohort/base/error.h"
#include "cohort/base/file.h"
#include "cohort/cli/args.h"
#include "cohort/trace/diagnosis.h"
#include "cohort/train/config.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace cohort::cli {
namespace {

int usage(std::ostream& os, int code) {
  os << "usage: cohort diagnose RUN_DIR [--json]\n\n"
        "Where each rank's steps went (computing, loading data, waiting for other ranks,\n"
        "communicating), the bus bandwidth the gradient allreduces reached against the transport\n"
        "probe measured at start-up, stragglers, and what to change. Works on finished and failed\n"
        "runs; writes RUN_DIR/diagnosis.json. --json prints that instead of the report.\n";
  return code;
}

}  // namespace

int diagnose_main(int argc, char** argv) {
  Args args(argc, argv, {}, {"help", "json"});
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
      .straggler = {.margin = cfg.debug.straggler_margin, .window = cfg.debug.straggler_window}};
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
      throw Error(dir.string() + ": the workers were a Python program (" + cfg.program.python +
                  "), whose steps Cohort does not split into computing and waiting; its reports "
                  "are in metrics.jsonl, a hang's diagnosis in hang-report.txt");
    }
    throw Error(dir.string() + ": no steps/rank-N.jsonl (the run recorded no steps)");
  }
  const trace::Diagnosis d = trace::diagnose_run(ranks, job, outcome);
  const json j = d.to_json();
  write_file_atomically(dir / "diagnosis.json", j.dump(2) + "\n");
  if (args.has("json")) {
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << d.text() << "\n(written to " << (dir / "diagnosis.json").string() << ")\n";
  }
  return 0;
}

}  // namespace cohort::cli
