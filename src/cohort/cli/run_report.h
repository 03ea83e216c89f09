// What `cohort run` prints and writes about a job's progress and outcome (run.cc): the progress
// line, summary.json's aggregate of the ranks' summaries, and the report at the end.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cohort/train/config.h"

namespace cohort::cli {

// Prints progress: a bar redrawn in place on a terminal, one plain line per record otherwise.
class ProgressPrinter {
 public:
  ProgressPrinter();
  void record(const nlohmann::json& m);
  void end_line();

 private:
  bool tty_;
  bool drawn_ = false;
};

// summary.json of a job of built-in models from every rank's summary.
nlohmann::json aggregate_summary(const std::vector<nlohmann::json>& per_rank,
                                 const train::JobConfig& cfg, double wall);
// The same for a Python program's workers.
nlohmann::json python_summary(const std::vector<nlohmann::json>& per_rank,
                              const train::JobConfig& cfg, double wall);
// The report printed when a job completed.
void print_report(const nlohmann::json& s, const std::string& run_dir);
void print_python_report(const nlohmann::json& s, const std::string& run_dir);

}  // namespace cohort::cli
