// Which ranks share a host, decided from facts each rank reads about itself and exchanges at
// rendezvous, never from variables a launcher sets (LOCAL_WORLD_SIZE and the like can lie).
//
// Two ranks are on one host when they run under the same kernel boot, in the same network
// namespace and see the same /dev/shm. The network namespace is part of it so that an emulated
// cluster (scripts/netcluster.sh: one namespace per "host") keeps sending everything between its
// hosts over their links; /dev/shm is part of it because shared memory needs the same one (two
// containers of a pod may share a network but not a /dev/shm).
#pragma once

#include <string>

namespace cohort::comm::transport {

// A short token of [0-9a-f.-], the same for every process of this host as defined above.
const std::string& host_identity();

}  // namespace cohort::comm::transport
