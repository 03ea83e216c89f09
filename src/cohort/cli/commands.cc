#include "cohort/cli/commands.h"

namespace cohort::cli {

// Subcommand entry points, defined in their own files.
int bench_main(int argc, char** argv);
int status_main(int argc, char** argv);
int submit_main(int argc, char** argv);
int jobs_main(int argc, char** argv);
int cancel_main(int argc, char** argv);
int logs_main(int argc, char** argv);
int trace_main(int argc, char** argv);
int ps_server_main(int argc, char** argv);
#ifdef COHORT_WITH_TRAINING
int run_main(int argc, char** argv);
int worker_main(int argc, char** argv);
int serve_main(int argc, char** argv);
int diagnose_main(int argc, char** argv);
int checkpoint_main(int argc, char** argv);
int k8s_main(int argc, char** argv);
int calibrate_main(int argc, char** argv);
int simulate_main(int argc, char** argv);
#endif

const std::vector<Command>& commands() {
  static const std::vector<Command> kCommands = {
#ifdef COHORT_WITH_TRAINING
      {"run", "run a training job on this machine", run_main},
      {"worker", "one worker of a job (started by run, mpirun, srun, ...)", worker_main},
      {"serve", "the console of every job on this machine, with their history", serve_main},
      {"diagnose", "where a run's steps went, stragglers, and what to change", diagnose_main},
      {"checkpoint", "verify checkpoints the way a resume reads them", checkpoint_main},
      {"k8s", "the Kubernetes manifests that run a job on a cluster", k8s_main},
      {"calibrate", "measure this machine and a job for the simulator", calibrate_main},
      {"simulate", "predict a job's step time and scaling at any number of workers", simulate_main},
#endif
      {"bench", "measure collectives across local processes", bench_main},
      {"status", "show a running job's console in the terminal", status_main},
      {"submit", "queue a job with cohort serve", submit_main},
      {"jobs", "list cohort serve's jobs", jobs_main},
      {"cancel", "cancel a job of cohort serve", cancel_main},
      {"logs", "a run directory's logs merged in time order, or a cohort serve job's", logs_main},
      {"trace", "merge a job's per-rank timelines into one trace.json", trace_main},
      {"ps-server", "one parameter server of a job (started by run, or on a cluster)",
       ps_server_main},
  };
  return kCommands;
}

}  // namespace cohort::cli
