#include "cohort/cli/commands.h"

namespace cohort::cli {

// Subcommand entry points, defined in their own files.
int bench_main(int argc, char** argv);
#ifdef COHORT_WITH_TRAINING
int run_main(int argc, char** argv);
int worker_main(int argc, char** argv);
#endif

const std::vector<Command>& commands() {
  static const std::vector<Command> kCommands = {
#ifdef COHORT_WITH_TRAINING
      {"run", "run a training job on this machine", run_main},
      {"worker", "one worker of a job (started by run, mpirun, srun, ...)", worker_main},
#endif
      {"bench", "measure collectives across local processes", bench_main},
  };
  return kCommands;
}

}  // namespace cohort::cli
