// `cohort diagnose`: what a run's steps were spent on, per rank, and what to change.
//
// Input: every rank's step log (step_log.h), the bandwidth its transport probe measured at
// start-up, the job's settings that the advice may name, and for a run that failed its error and
// the headline of hang-report.txt.
//
// The breakdown of a rank's step: data (loading the batch), compute (forward, backward, optimizer
// step), wait (blocked on the gradient exchange until the last rank's gradients were ready: time
// lost to slower peers) and communication (blocked on the exchange after that: moving and reducing
// bytes that backward did not hide). Wait and communication come from the ranks' ready times at
// each step (ready_us, on rank 0's clock) over the steps every rank of the same world reported;
// steps with a missing rank count their whole sync time as communication.
//
// Achieved bus bandwidth: the bytes a rank's gradient collectives put on the wire over their
// summed duration (nccl-tests' busbw for a ring allreduce: each rank sends 2(n-1)/n of the
// buffer), on the rank that waited least for its peers (the others' collectives include waiting).
// It is compared with the probe: an allreduce of a few MB timed at start-up over the same
// transport, the best this machine's transport did with buffers of that size.
//
// The advice is a list of rules over those numbers (see recommendations()); each names the number
// it comes from and only job-file keys that exist.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cohort/trace/step_log.h"
#include "cohort/trace/straggler.h"

namespace cohort::trace {

// The job's settings the advice refers to.
struct JobFacts {
  std::string name;
  int64_t workers = 1;
  int64_t threads_per_worker = 1;
  int64_t batch_size = 0;
  std::string model;
  std::string compression = "none";
  double bucket_mb = 25;
  std::string algorithm = "auto";
  std::string sync_mode = "allreduce";  // sync.mode
  StragglerOptions straggler;
  // A Python program's script (program.python): its steps are the spans between its reports,
  // with data loading inside compute, and the advice names what its script can change.
  std::string program;
};

// What local SGD would have made of this run's measured steps (an allreduce run): every rank
// waits for the others once per period instead of every step, and the model is averaged once per
// period. Over each window of `period` steps every rank reported, the window takes the longest
// rank's busy time (data and compute) summed over its steps, plus one exchange (the run's mean
// communication per step: a model average moves what a gradient allreduce moves). Convergence is
// not modelled.
struct LocalSgdEstimate {
  int64_t period = 8;
  int64_t steps = 0;       // the steps of the windows
  double measured_s = 0;   // their mean step time as run
  double local_sgd_s = 0;  // the estimate per step
  double speedup() const { return local_sgd_s > 0 ? measured_s / local_sgd_s : 0; }
};

// What ssp (parameter servers, bounded staleness) would have made of this run's measured steps
// (an allreduce run): rank r may start step k once it finished step k - 1 and every rank finished
// step k - staleness - 1; each step takes the rank's measured busy time (data and compute) plus
// one exchange (the run's mean communication per step), and then waits until every rank has
// pushed step k, for at most fresh_wait of its own mean step (the servers hold its pull's answer
// that long for a fresh model). The job's time is the last rank's end:
// a persistent straggler still has all of its own steps to train, so bounded staleness absorbs
// transient slowness, not a rank that is always slow. Convergence is not modelled.
struct SspEstimate {
  int64_t staleness = 3;
  // How long a rank's pull waits for the clock it pushed to complete, as a fraction of its own
  // step (sync.fresh_wait; its default).
  double fresh_wait = 0.5;
  int64_t steps = 0;
  double measured_s = 0;  // the mean step time as run
  double ssp_s = 0;       // the estimate per step
  double speedup() const { return ssp_s > 0 ? measured_s / ssp_s : 0; }
};

// How the run ended (summary.json, hang-report.txt); all optional.
struct RunOutcome {
  std::string status;         // "completed", "failed", "cancelled"; empty: unknown (no summary)
  std::string error;          // summary.json's error
  std::string hang_cause;     // hang-report.txt's first line
  std::string hang_headline;  // its diagnosis
};

struct RankBreakdown {
  int rank = 0;
  int64_t steps = 0;
  double step_s = 0;  // means per step
  double data_s = 0;
  double compute_s = 0;
  double wait_s = 0;
  double comm_s = 0;
  double busbw_gbps = 0;  // achieved over its gradient collectives (0: none)
  uint64_t bytes_per_step = 0;
  double share(double part) const { return step_s > 0 ? part / step_s : 0; }
};

struct Diagnosis {
  JobFacts job;
  RunOutcome outcome;
  std::vector<RankBreakdown> ranks;
  RankBreakdown mean;        // over ranks (rank -1)
  int64_t common_steps = 0;  // steps every rank reported (the wait/communication split)
  double achieved_busbw_gbps = 0;
  double probe_busbw_gbps = 0;  // 0: no probe
  uint64_t probe_bytes = 0;
  std::string probe_algorithm;
  std::vector<Straggler> stragglers;
  std::optional<LocalSgdEstimate> local_sgd;  // allreduce runs with enough common steps
  std::optional<SspEstimate> ssp;             // the same
  std::vector<std::string> findings;          // one line each, the numbers
  std::vector<std::string> recommendations;   // what to change

  nlohmann::json to_json() const;
  std::string text() const;
};

Diagnosis diagnose_run(const std::vector<RankSteps>& ranks, const JobFacts& job,
                       const RunOutcome& outcome);

// The rules, on a finished breakdown (diagnose_run calls it; tests call it on constructed
// numbers).
std::vector<std::string> recommendations(const Diagnosis& d);

// The first line (cause) and the headline of a hang-report.txt's text.
RunOutcome read_hang_report(const std::string& text, RunOutcome outcome);

}  // namespace cohort::trace
