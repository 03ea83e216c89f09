// A process group from environment variables, for programs that start their own processes (a shell
// loop, mpirun, srun) instead of `cohort run`:
//
//   COHORT_RANK          this process's rank; falls back to OMPI_COMM_WORLD_RANK (Open MPI),
//                        PMI_RANK (MPICH, Intel MPI) and SLURM_PROCID (srun)
//   COHORT_WORLD_SIZE    number of ranks; falls back to OMPI_COMM_WORLD_SIZE, PMI_SIZE,
//   SLURM_NTASKS COHORT_MASTER_ADDR   HOST:PORT of the rendezvous store: rank 0 serves it there,
//   the other ranks
//                        connect to it (retrying until the timeout while rank 0 is not up yet)
//   COHORT_TOKEN         the job's secret; every connection proves it (required)
//   COHORT_TIMEOUT_S     deadline of setup and of every collective, in seconds (default 30)
//   COHORT_BIND_HOST     where this rank listens for its peers (default 127.0.0.1)
//   COHORT_ADVERTISE_HOST  what the peers dial to reach this rank (default COHORT_BIND_HOST)
//
// A missing or invalid variable is a ConfigError that names the variable and its value.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "cohort/comm/communicator.h"
#include "cohort/net/socket.h"
#include "cohort/store/store.h"
#include "cohort/store/tcp_store.h"

namespace cohort::elastic {

struct EnvOptions {
  // Values that take precedence over the process environment, by variable name. Programs with
  // their own flags and tests (which run several ranks as threads of one process, where the
  // environment is shared) pass their values here.
  std::map<std::string, std::string> variables = {};
  // Whether variables not in `variables` are read from the process environment.
  bool read_process_environment = true;
  // Namespace of the communicator's keys in the store (CommConfig::store_prefix).
  std::string store_prefix = "comm";
};

// The parsed variables, before anything connects.
struct EnvConfig {
  int rank = 0;
  int world_size = 1;
  net::Endpoint master;
  std::string token;
  std::chrono::milliseconds timeout{30000};
  std::string bind_host = "127.0.0.1";
  std::string advertise_host;  // empty: bind_host
};

// Reads and checks the variables; throws ConfigError naming the variable and its value.
EnvConfig read_environment(const EnvOptions& options = {});

// The rendezvous store and a communicator of all ranks.
//
// Members are declared so that they are destroyed in the right order: the communicator first (it
// reports failures to the store), then the store client, then - on rank 0 - the store server.
// Rank 0 must not stop the server while other ranks still use it: finish() (called by the
// destructor if the program did not) has every other rank mark itself done in the store and rank 0
// wait for all those marks before the server goes away.
struct ProcessGroup {
  std::unique_ptr<store::StoreServer> server;  // rank 0 only
  std::unique_ptr<store::Store> store;
  std::unique_ptr<comm::Communicator> comm;

  ProcessGroup() = default;
  ProcessGroup(ProcessGroup&&) noexcept = default;
  ProcessGroup& operator=(ProcessGroup&&) = delete;
  ~ProcessGroup();

  int rank() const { return comm->rank(); }
  int size() const { return comm->size(); }

  // Ends this rank's use of the store. Ranks other than 0 return at once; rank 0 waits (until the
  // timeout; TimeoutError naming the ranks) for every other rank to call finish() as well. The
  // communicator stays usable for collectives; the store may be gone afterwards.
  void finish();

 private:
  friend ProcessGroup init_from_environment(const EnvOptions& options);
  std::string done_key(int rank) const;
  std::string prefix_;
  std::chrono::milliseconds timeout_{30000};
  bool finished_ = false;
};

// Reads the environment (read_environment), starts the store server on rank 0, connects every rank
// to it and builds the communicator. Blocks until every rank has joined or the timeout passes.
ProcessGroup init_from_environment(const EnvOptions& options = {});

}  // namespace cohort::elastic
