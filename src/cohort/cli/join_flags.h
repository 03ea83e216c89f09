// What every process that joins a running job reads from its command line (cohort worker,
// cohort ps-server): the job's address, its token and the address others reach it at.
#pragma once

#include <string>

#include "cohort/cli/args.h"

namespace cohort::cli {

struct JoinFlags {
  std::string join;   // --join: HOST:PORT of the job's store, or an etcd address
  std::string token;  // --token-file, else COHORT_TOKEN; never from the command line itself
  std::string bind;   // --bind, else the address of this host's interface towards the store
};

// ConfigError naming the flag for an address that is neither form, a missing token, or a host
// whose address towards the store cannot be told (`who`: "peers reach this worker").
JoinFlags read_join_flags(const Args& args, const std::string& who);

}  // namespace cohort::cli
