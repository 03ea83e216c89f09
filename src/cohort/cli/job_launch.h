// The launcher of one job (run_job.h) as a class, in the order a job goes: run_job.cc opens its
// run directory, starts its coordinator, workers and parameter servers and supervises them;
// run_job_end.cc watches them for stragglers and hangs, and ends the job (every process stopped,
// summary.json written, the report printed).
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cohort/base/clock.h"
#include "cohort/cli/job_files.h"
#include "cohort/cli/ps_fleet.h"
#include "cohort/cli/python_launch.h"
#include "cohort/cli/readopt.h"
#include "cohort/cli/run_job.h"
#include "cohort/cli/run_report.h"
#include "cohort/elastic/coordinator.h"
#include "cohort/elastic/process.h"
#include "cohort/monitor/live_console.h"
#include "cohort/store/store.h"
#include "cohort/trace/hang_report.h"
#include "cohort/trace/straggler.h"
#include "cohort/train/config.h"

namespace cohort::cli::detail {

using nlohmann::json;
namespace fs = std::filesystem;

class JobLaunch {
 public:
  JobLaunch(const train::JobConfig& cfg, const RunSettings& settings);
  int run();

 private:
  void open_run_dir();
  // The coordinator: one that re-adopts the workers a predecessor left running (--resume of a run
  // whose coordinator died), or, when none of them answers or there is none, a fresh one.
  void start_coordinator();
  std::unique_ptr<elastic::Coordinator> make_coordinator(bool readopt) const;
  void announce();
  void start_workers();
  // Starts job rank `rank` in `slot` (0 .. workers-1): its own for the workers of the start, the
  // lost worker's for a replacement, whose CPUs and torchrun ranks it takes over.
  pid_t spawn(int rank, int slot);
  // A local worker's share of this machine's CPUs (RunSettings::bind_to_cpus).
  void bind_to_share(elastic::SpawnOptions& how, int slot) const;
  // Whether a worker may still join: restarts left, or a replacement not yet admitted. Workers
  // started elsewhere (--external-workers) are never replaced by this launcher.
  bool joiners_possible();
  // Reads each member's live status (its recent busy times) and reports new stragglers.
  void check_stragglers();
  // One pass of the supervising loop; false once the job has ended (status_ and error_ say how).
  bool supervise_once();
  bool end(std::string status, std::string error);
  void forward_metrics();
  void forward_worker_events();
  void reap_workers();
  void follow_membership();
  void watch_for_hangs();
  // The end: every process stopped, summary.json written, the report printed. The exit code.
  int finish();
  json summarize(double wall, json exits);

  const train::JobConfig& cfg_;
  const RunSettings& settings_;
  const bool python_;
  // Under mpirun the workers are one process of this launcher's, not one each: it tracks them
  // through the coordinator, as workers started elsewhere. So are a predecessor's workers.
  bool external_;
  std::optional<SlurmAllocation> slurm_;
  fs::path run_dir_;
  std::unique_ptr<EventLog> events_;

  std::string job_store_;
  bool readoptable_ = false;
  std::optional<CoordinatorRecord> previous_;
  std::string token_file_, token_;
  bool own_token_file_ = false;
  std::unique_ptr<elastic::Coordinator> coordinator_;
  std::string local_join_, join_;
  std::unique_ptr<monitor::LiveConsole> console_;

  Clock::time_point start_;
  std::unique_ptr<WorkerCommand> command_;
  std::unique_ptr<ProcessStarter> starter_;
  std::string local_host_;
  // Worker processes by rank in the job: 0 .. workers-1, then replacements workers, workers+1, ...
  std::map<int, elastic::ChildProcess> workers_;
  std::map<int, bool> exit_ok_;  // by rank, once its process exited: whether it succeeded
  std::map<int, int> slot_of_;   // by rank: the slot it runs in (spawn)
  int next_rank_ = 0;
  int restarts_ = 0;
  std::unique_ptr<store::Store> ps_store_;
  std::unique_ptr<ServerFleet> servers_;
  std::unique_ptr<TorchRendezvous> rendezvous_;  // a Python program's env:// rendezvous
  std::optional<elastic::ChildProcess> group_;   // --launcher mpirun

  std::unique_ptr<store::Store> debug_store_;
  std::unique_ptr<trace::HangWatch> hang_watch_;
  Clock::time_point next_hang_check_, next_straggler_check_;
  std::ofstream metrics_;
  ProgressPrinter progress_;
  trace::StragglerWatch stragglers_;

  std::string status_ = "completed", error_;
  std::vector<std::string> losses_;  // "rank R (host, pid P): cause", in order
};

}  // namespace cohort::cli::detail
