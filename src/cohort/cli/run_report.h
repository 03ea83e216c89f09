// What `cohort run` prints and writes about a job's progress and outcome (run.cc): the progress
// line, summary.json's aggregate of the ranks' summaries, and the report at the end.
#pragma once

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cohort/cli/job_files.h"
#include "cohort/elastic/process.h"
#include "cohort/trace/hang_report.h"
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

// The last `max_bytes` of a file (a failed worker's log), or "".
std::string tail_of(const std::filesystem::path& p, size_t max_bytes = 2000);
// Collects every rank's flight record, writes <run_dir>/hang-report.txt and prints the diagnosis;
// `workers` (the launcher's own, by rank) say what became of a rank that did not answer.
void report_hang(trace::HangWatch& watch, std::map<int, elastic::ChildProcess>& workers,
                 const std::filesystem::path& run_dir, EventLog& events, const std::string& cause);

}  // namespace cohort::cli
