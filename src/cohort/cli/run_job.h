// The launcher of one job (run.cc): `cohort run JOB.yaml` and `cohort run SCRIPT.py` both end here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cohort/cli/launchers.h"
#include "cohort/train/config.h"

namespace cohort::cli {

struct RunSettings {
  std::string run_dir;     // empty: runs/<name>-<time>, or resume_dir
  std::string resume_dir;  // a run directory to resume (its config.yaml is the job)
  std::string bind = "127.0.0.1";
  uint16_t port = 0;
  std::string token_file;
  bool external = false;  // workers are started elsewhere (cohort worker --join)
  std::string standby;    // the etcd address of a job to take over when its coordinator is gone
  // Where under coordinator.store's prefix the job's keys go (empty: the run directory's name and
  // the start time), so that workers started beforehand know what to join.
  std::string run_id;
  LauncherKind launcher = LauncherKind::Local;  // what starts the workers (launchers.h)
  // Local workers each bound to their own share of this machine's CPUs when there are at most as
  // many workers as CPUs, as mpirun binds its ranks (--bind-to auto); false: unbound.
  bool bind_to_cpus = true;
  std::vector<std::string> launcher_args;  // the user's options for mpirun or sbatch
};

// The time now as a run directory's name ends: 20261204-031500.
std::string timestamp_for_dir();

// Runs the job to its end; the process's exit code (0 completed, 1 failed, 130 cancelled).
int run_job(const train::JobConfig& cfg, const RunSettings& settings);

}  // namespace cohort::cli
