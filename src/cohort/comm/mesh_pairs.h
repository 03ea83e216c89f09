// Internal to the mesh (mesh.cc): the last step of setup, which turns each authenticated
// connection into the pair that carries it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cohort/base/clock.h"
#include "cohort/comm/mesh.h"
#include "cohort/comm/transport/pair.h"
#include "cohort/net/socket.h"

namespace cohort::comm {

// What the handshake told this rank about one peer.
struct PeerLink {
  net::Socket sock;  // connected and authenticated
  std::string host;  // the peer's host identity
  bool shm = false;  // the peer would use shared memory
};

// The host identity this rank states: CommConfig::host_id, or the one it detects.
const std::string& this_host(const CommConfig& o);

// One pair per peer (null for this rank). Peers on this host that would use shared memory, like
// this rank, agree on a segment over their connection first:
//   the higher rank of the pair (the one that dialled) creates it and sends
//       "shm <name> <ring bytes>"   or   "tcp <why it could not>",
//   the lower rank opens it (removing its name) and answers "ok" or "tcp <why>".
// Every offer is sent before any is read, and every answer needs only the offers, so no rank
// waits on another in a cycle. Under Transport::Auto a pair that could not agree stays on TCP with
// a warning; under Transport::Shm setup fails naming both ranks and why.
std::vector<std::unique_ptr<transport::Pair>> make_pairs(const CommConfig& o,
                                                         std::vector<PeerLink>& links,
                                                         Deadline deadline);

// The ring size of each direction of a shared-memory pair on a host of `local_ranks` ranks: the
// largest power of two that keeps every segment of the host within shm_host_bytes, at most
// shm_ring_bytes and at least 64 KiB.
size_t shm_ring_bytes_for(const CommConfig& o, int local_ranks);

}  // namespace cohort::comm
