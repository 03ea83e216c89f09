// A Python worker of a Cohort job. A script that `cohort run` starts (a job file's `program:`, or
// `cohort run train.py`) finds in its environment where the job's coordinator is (COHORT_JOIN),
// its rank in the job (COHORT_JOB_RANK) and the token (COHORT_TOKEN); `import cohort` then makes
// it a worker of that job the way `cohort worker` is one:
//   - it joins (job/joined/<rank>) and heartbeats, so the launcher, the console and `cohort status`
//     see it, and a worker that stops or hangs is declared lost;
//   - the torch.distributed group it builds first (init_process_group("cohort")) runs on the
//     communicator of the job's membership epoch, so a lost peer aborts its collectives at once
//     and its flight recorder is the one the launcher's hang reports read;
//   - cohort.report(step=..., loss=...) feeds the launcher's progress line, metrics.jsonl and the
//     console, and fires the job's `faults:` at that step;
//   - the span between two reports is a step of its step log (steps/rank-N.jsonl in the run
//     directory, trace/step_log.h): how long it was blocked on the group's collectives
//     (trace/exchange_clock.h), the rest counted as computing (Cohort cannot tell the script's
//     data loading from its compute), so that `cohort diagnose` works on a Python run;
//   - its end posts its summary, an uncaught exception its failure (job_protocol.h).
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cohort/base/clock.h"
#include "cohort/comm/communicator.h"
#include "cohort/comm/flight_recorder.h"
#include "cohort/dist/process_group.h"
#include "cohort/elastic/agent.h"
#include "cohort/net/socket.h"
#include "cohort/store/connect.h"
#include "cohort/trace/exchange_clock.h"
#include "cohort/trace/hang_report.h"
#include "cohort/trace/step_log.h"
#include "cohort/train/config.h"
#include "cohort/train/faults.h"

namespace cohort::python {

struct JobWorkerOptions {
  std::string join;  // where the job's store is: HOST:PORT or etcd://... (store/connect.h)
  std::string token;
  int rank = 0;  // in the job (stable across membership epochs)
};

class JobWorker : public std::enable_shared_from_this<JobWorker> {
 public:
  // Joins the job; throws Error when the coordinator cannot be reached or refuses the token.
  explicit JobWorker(const JobWorkerOptions& options);
  ~JobWorker();
  JobWorker(const JobWorker&) = delete;
  JobWorker& operator=(const JobWorker&) = delete;

  // The options the launcher put in the environment; nullopt when it did not (no COHORT_JOIN).
  // ConfigError for a malformed variable.
  static std::optional<JobWorkerOptions> options_from_environment();

  int rank() const { return options_.rank; }
  const train::JobConfig& config() const { return config_; }

  // The membership this worker belongs to, joining the job first if it has not: the start's for
  // a worker of the start, or, for a replacement, the one that admits it (it waits for that).
  elastic::Membership join();
  // After the job's communicator failed, or at a commit where a change was requested: leaves the
  // current membership epoch (aborting its communicator with `reason` if not empty) and waits for
  // the next. Throws elastic::ExcludedError when the job went on without this worker.
  elastic::Membership rejoin(const nlohmann::json& info, const std::string& reason);
  // Whether the coordinator asked for a membership epoch after the current one.
  bool change_requested() const;
  // Whether the communicator of the current epoch has failed (and how: its message), or a change
  // is requested (its collectives are being aborted).
  std::optional<std::string> comm_failure() const;

  // The communicator for a group of `rank` of `size` being built, when it is the job's: this
  // worker's place in the current membership, and no other group got this epoch's. Its
  // collectives' deadline is `timeout`, or the job file's comm.timeout_s when `timeout` is
  // torch's default (30 minutes: the script did not choose). The group's reference keeps it (and
  // this worker) alive; after a membership change it is aborted.
  std::shared_ptr<comm::Communicator> claim(int rank, int size, std::chrono::milliseconds timeout);
  // What a group over the claimed communicator needs besides it.
  dist::GroupSettings group_settings() const;

  // cohort.report(): `record` holds at least "step". Every rank publishes its live status; rank 0
  // of the membership posts the progress record (and, the first time after a failure, tells the
  // coordinator the job has recovered). Then the job's faults for this step fire.
  void report(nlohmann::json record);
  // The script ended normally: posts the summary (once).
  void finish(nlohmann::json summary);
  // The script ended with an uncaught exception: the final flight record and the failure.
  void fail(const std::string& what, bool timed_out);

 private:
  void publish_status(nlohmann::json s);
  // Under mu_, at a report of a new step: the step log's record of the span since the last one.
  void log_step(int64_t step);

  JobWorkerOptions options_;
  std::unique_ptr<store::Store> store_;
  train::JobConfig config_;
  std::shared_ptr<comm::FlightRecorder> recorder_;
  std::unique_ptr<trace::FlightReporter> reporter_;  // reads the recorder: after it
  std::unique_ptr<elastic::WorkerAgent> agent_;
  std::unique_ptr<train::FaultInjector> faults_;
  Clock::time_point step_began_ = Clock::now();  // after the previous report's slowdown
  std::string run_dir_;                          // the job's; empty: no step log
  std::shared_ptr<trace::ExchangeClock> exchange_clock_ = std::make_shared<trace::ExchangeClock>();

  mutable std::mutex mu_;  // guards what follows (Python threads may report)
  std::optional<elastic::Membership> membership_;
  int claimed_epoch_ = -1;                     // the epoch whose communicator a group holds
  std::weak_ptr<comm::Communicator> claimed_;  // that communicator
  bool recovering_ = false;  // left an epoch after a failure; rank 0 reports the recovery
  nlohmann::json recovery_;  // what it reports
  nlohmann::json status_;
  bool ended_ = false;
  nlohmann::json progress_ = nlohmann::json::object();  // every key reported so far
  // The window since the previous report, for the rates.
  int64_t reports_ = 0;
  int64_t last_step_ = 0;
  Clock::time_point last_report_ = Clock::now();
  double samples_ = 0;
  std::unique_ptr<trace::StepLog> step_log_;  // from the first group on the job's communicator
  comm::CollectiveTotals totals_;             // the recorder's at the previous report
};

}  // namespace cohort::python
