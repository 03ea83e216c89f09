// The keys a job's coordinator and its workers exchange through the rendezvous store.
//
//   job/config            resolved job file (YAML), set by the coordinator before any worker joins
//   job/world_size        number of workers
//   job/run_dir           the run directory on the coordinator's machine
//   job/resume            checkpoint file to resume from ("" for a fresh start)
//   job/next_rank         counter: a worker without a rank from its launcher takes the next one
//   job/joined/<rank>     set by each worker once it has joined (its host and pid, JSON)
//   job/metrics/<i>       i-th progress record (JSON) from rank 0, i = 0, 1, 2, ...
//   job/summary/<rank>    each worker's final report (JSON)
//   job/failed/<rank>     a worker's fatal error (text)
//   comm/e<epoch>/...     the communicator of membership epoch <epoch>
#pragma once

#include <string>

namespace cohort::elastic::keys {

inline const std::string kConfig = "job/config";
inline const std::string kWorldSize = "job/world_size";
inline const std::string kRunDir = "job/run_dir";
inline const std::string kResume = "job/resume";
inline const std::string kNextRank = "job/next_rank";
inline std::string joined(int rank) { return "job/joined/" + std::to_string(rank); }
inline std::string metrics(long i) { return "job/metrics/" + std::to_string(i); }
inline std::string summary(int rank) { return "job/summary/" + std::to_string(rank); }
inline std::string failed(int rank) { return "job/failed/" + std::to_string(rank); }
inline std::string comm_prefix(int epoch) { return "comm/e" + std::to_string(epoch); }

}  // namespace cohort::elastic::keys
