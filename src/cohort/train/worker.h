// One worker of a training job: joins the coordinator, learns its rank and the job, connects to its
// peers, receives the initial state from rank 0, trains on its shard with DistributedDataParallel,
// reports progress, writes checkpoints (rank 0) and evaluates at the end.
#pragma once

#include <string>

#include "cohort/net/socket.h"

namespace cohort::train {

struct WorkerOptions {
  std::string join;  // where the job's store is: HOST:PORT or etcd://... (store/connect.h)
  std::string token;
  int rank = -1;                        // -1: take the next free rank from the coordinator
  std::string bind_host = "127.0.0.1";  // where this worker listens for its peers
};

// Exit code of a worker that found itself excluded from the job (declared lost while it was
// stopped or cut off): not a failure of the job.
inline constexpr int kExitExcluded = 3;

// Returns the process exit code: 0 on success. Failures are logged and reported to the coordinator.
int run_worker(const WorkerOptions& options);

}  // namespace cohort::train
