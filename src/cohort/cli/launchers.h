// How `cohort run` starts the workers of a job: where they run and with what command.
//
//   local    (the default) each worker a child process on this machine
//   slurm    inside a Slurm allocation, each worker a job step of its own (`srun --ntasks 1
//            --exact --kill-on-bad-exit=0`), placed round-robin over the allocation's nodes; a
//            worker that Slurm kills or that crashes is replaced by a new step. The coordinator
//            runs in this process, on the allocation's first node, and listens on every address.
//   mpirun   one `mpirun -np N cohort worker --join ...` for the workers (their ranks from Open
//            MPI's variables), with the settings that keep the other ranks running when one dies
//            (docs/clusters.md); a lost rank's survivors go on without it.
//
// Whatever starts them, the workers are the same `cohort worker --join HOST:PORT` processes and
// the job's protocol is the same: the coordinator learns of each from the store.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cohort/elastic/process.h"
#include "cohort/elastic/spawner.h"

namespace cohort::cli {

enum class LauncherKind { Local, Slurm, Mpirun };

// "local" | "slurm" | "mpirun"; ConfigError naming --launcher otherwise.
LauncherKind parse_launcher(std::string_view s);

// What every worker process gets, whoever starts it.
struct WorkerCommand {
  std::string executable;  // this binary
  std::string join;        // HOST:PORT of the coordinator, as the workers' nodes reach it
  std::string token;       // the job token (in the environment, never on a command line)
  long threads = 1;        // OMP/OpenBLAS threads per worker
  std::string log;         // the worker's log file (stdout and stderr)
};

// The Slurm allocation this process runs in (SLURM_JOB_ID, SLURM_JOB_NODELIST): its nodes in
// order and the address of each (their NodeAddr), from `scontrol`. ConfigError outside one.
struct SlurmAllocation {
  std::string job_id;
  std::vector<std::string> nodes;
  std::vector<std::string> addresses;
  static SlurmAllocation current();
  // The address of the node this process runs on (SLURMD_NODENAME), else of the first node.
  std::string this_node_address() const;
  // Whether Slurm is ending the job (scancel, its time limit, a node failure): slurmctld marks
  // the job before slurmd signals any of its steps, so a worker's step that died of it shows
  // here even when the launcher's own SIGTERM has not arrived yet. "JobState=... Reason=..."
  // then, empty while the job runs (or when slurmctld cannot be asked).
  std::string ending() const;
};

// A worker as a child process of this one, on this machine.
elastic::SpawnOptions local_worker(const WorkerCommand& w, int rank);

// Starts the launcher's processes by fork+exec, or, with a fork server, those of this binary by a
// fork of the spawner (elastic/spawner.h: a local worker starts in milliseconds rather than
// loading libtorch again). A spawner that cannot start, or stops answering, is given up for
// fork+exec with a warning.
class ProcessStarter {
 public:
  ProcessStarter(const WorkerCommand& w, bool fork_server);
  elastic::ChildProcess start(const elastic::SpawnOptions& how);

 private:
  std::string self_;
  std::unique_ptr<elastic::Spawner> spawner_;
};

// A worker as a job step of its own on node `rank % nodes` of the allocation.
elastic::SpawnOptions slurm_worker(const SlurmAllocation& a, const WorkerCommand& w, int rank);

// Every worker of the job under one mpirun (ranks from OMPI_COMM_WORLD_RANK), `mpirun_args` (the
// user's, e.g. --host, --hostfile) before the command.
elastic::SpawnOptions mpirun_workers(const WorkerCommand& w, long workers,
                                     const std::vector<std::string>& mpirun_args);

// `sbatch` for this job: a batch script that runs `cohort run ARGS... --launcher slurm` in the
// allocation it asks for (a task per worker, `threads` CPUs each), its output in `output`, with
// Slurm's warning signal (SIGTERM to the launcher 60 s before the time limit); `sbatch_args` (the
// user's: --time, --partition, --nodes, ...) before the script.
std::vector<std::string> sbatch_command(const std::string& name, long workers, long threads,
                                        const std::string& output,
                                        const std::vector<std::string>& sbatch_args,
                                        const std::vector<std::string>& cohort_run_args);

}  // namespace cohort::cli
