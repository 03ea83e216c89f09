// What `cohort run` does differently when the job's workers are a Python program (a job file's
// `program:`, or `cohort run train.py`): each worker is the script, started the way torchrun starts
// it, so that a script written for torchrun runs unchanged, and told where the job's coordinator
// is, so that `import cohort` makes it a worker of the job (python/job_worker.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cohort/elastic/process.h"
#include "cohort/train/config.h"

namespace cohort::cli {

// torch.distributed's rendezvous store for env:// (MASTER_ADDR, MASTER_PORT), served by the
// launcher as torchrun's agent serves its own (TORCHELASTIC_USE_AGENT_STORE: no worker starts one).
class TorchRendezvous {
 public:
  TorchRendezvous(const std::string& host, uint16_t port, int workers);
  ~TorchRendezvous();
  uint16_t port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct PythonWorker {
  int rank = 0;             // in the job (COHORT_JOB_RANK)
  int slot = 0;             // RANK and LOCAL_RANK: a replacement takes the lost worker's
  int restarts = 0;         // replacements started before it (TORCHELASTIC_RESTART_COUNT)
  int world_size = 1;       // WORLD_SIZE as torchrun gives it
  std::string coordinator;  // HOST:PORT of the job's coordinator (COHORT_JOIN)
  std::string master_addr;
  uint16_t master_port = 0;
  std::string token;
  std::string run_dir;  // absolute
  std::string log;      // the worker's stdout and stderr
};

// The process of one worker of a Python job: `interpreter -u script args...` with torchrun's
// variables (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...) and
// Cohort's (COHORT_JOIN, COHORT_JOB_RANK, COHORT_TOKEN, COHORT_RUN_DIR).
elastic::SpawnOptions python_worker_process(const train::JobConfig& cfg, const PythonWorker& w);

// Where `cohort run`'s first argument that is not an option (nor an option's value) is, when it
// names a Python script; -1 otherwise (a job file, or nothing).
int python_script_at(int argc, char** argv);
// `cohort run [options] SCRIPT.py [args]`: the job of that script (run_job in run.cc).
int run_python_main(int argc, char** argv);

}  // namespace cohort::cli
