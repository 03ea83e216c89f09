// `cohort worker --join HOST:PORT`: one worker of a job. Started by `cohort run` on this machine,
// or by whatever runs processes on a cluster (mpirun, srun, a Kubernetes Indexed Job). The job
// token comes from the COHORT_TOKEN environment variable (or --token-file), never from the command
// line.
#include "cohort/train/worker.h"

#include <cstdlib>
#include <iostream>

#include "cohort/base/error.h"
#include "cohort/base/secret.h"
#include "cohort/cli/args.h"
#include "cohort/cli/commands.h"
#include "cohort/cli/join_flags.h"
#include "cohort/net/socket.h"
#include "cohort/store/connect.h"

namespace cohort::cli {
namespace {

// The rank a cluster launcher assigned, if any.
int rank_from_environment() {
  for (const char* var : {"COHORT_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK",
                          "SLURM_PROCID", "JOB_COMPLETION_INDEX"}) {
    if (const char* v = std::getenv(var)) {
      try {
        return std::stoi(v);
      } catch (const std::exception&) {
        throw ConfigError(std::string("environment variable ") + var + "='" + v +
                          "' is not a rank");
      }
    }
  }
  return -1;
}

}  // namespace

int worker_main(int argc, char** argv) {
  Args args(argc, argv, {"join", "rank", "token-file", "bind"}, {"help"});
  if (args.has("help") || !args.has("join")) {
    (args.has("help") ? std::cout : std::cerr)
        << "usage: cohort worker --join HOST:PORT|etcd://HOST:PORT/PREFIX [--rank R] [--bind HOST] "
           "[--token-file F]\n"
           "--bind: where peers reach this worker (default: the address of the interface that\n"
           "leads to the coordinator). The rank comes from --rank, else COHORT_RANK, Open MPI,\n"
           "Slurm or a Kubernetes Indexed Job; a rank that joined before is replaced.\n"
           "The job token is read from COHORT_TOKEN or --token-file.\n";
    return args.has("help") ? 0 : 2;
  }
  const JoinFlags flags = read_join_flags(args, "peers reach this worker");
  train::WorkerOptions opts;
  opts.join = flags.join;
  opts.token = flags.token;
  opts.bind_host = flags.bind;
  opts.rank = static_cast<int>(args.get_int("rank", rank_from_environment()));
  return train::run_worker(opts);
}

}  // namespace cohort::cli
