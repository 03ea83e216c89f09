// Internal to the mesh (mesh.cc, mesh_lazy.cc): what ranks state about themselves, dialling a
// peer, and turning each authenticated connection into the pair that carries it.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cohort/base/clock.h"
#include "cohort/comm/frame_seal.h"
#include "cohort/comm/mesh.h"
#include "cohort/comm/transport/pair.h"
#include "cohort/net/socket.h"
#include "cohort/store/store.h"

namespace cohort::comm {

// The listen backlog: a rank of a large world is dialled by many ranks at once.
inline constexpr int kListenBacklog = 4096;

// What a rank states about itself in the handshake:
// "rank=R size=N host=H shm=0|1 cpus=C mac=0|1|2" (cpus: how many CPUs the ranks of its host
// share, as it counts them, usable_cpus; mac: how its data frames are sealed,
// CommConfig::integrity).
struct PeerInfo {
  int rank = -1;
  int size = -1;
  std::string host;
  bool shm = false;
  int cpus = 1;
  Integrity integrity = Integrity::None;
};
// CPUs the ranks of this host share: what their launcher says it shared out among them
// (CommConfig::host_cpus), else this process's affinity mask (cgroup cpusets narrow it too).
int usable_cpus(const CommConfig& o);
// The ranks per CPU of the most crowded host, rounded up: a host's ranks over the CPUs they share
// (the fewest any of its ranks counts); rank r is on host host_of[r] and counts cpus[r]. 1 where
// no host has more ranks than CPUs.
int most_ranks_per_cpu(const std::vector<int>& host_of, const std::vector<int>& cpus);
// What this rank states.
std::string info_of(const CommConfig& o);
// nullopt if malformed.
std::optional<PeerInfo> parse_info(const std::string& s);
// Why this rank cannot talk to `peer` (it does not seal its frames as this rank does), or empty.
std::string integrity_mismatch(const CommConfig& o, const PeerInfo& peer);

std::string join_ranks(const std::vector<int>& ranks);

// Rendezvous: "<prefix>/addr/<rank>" = "host:port" of this rank's listener.
void publish_address(store::Store& store, const CommConfig& o, uint16_t port);

// Setup's waits, in slices (250 ms) that notice CommConfig::setup_cancelled: throws AbortedError
// once it is set, else returns the earlier of `deadline` and the next look at it.
Deadline setup_slice(const CommConfig& o, Deadline deadline);
// Waits for `keys` in the store until `deadline` (TimeoutError), in such slices.
void wait_for_keys(store::Store& store, const CommConfig& o, const std::vector<std::string>& keys,
                   Deadline deadline);
struct PeerLink {
  net::Socket sock;  // connected and authenticated
  std::string host;  // the peer's host identity
  bool shm = false;  // the peer would use shared memory
  int cpus = 1;      // the CPUs the peer counts on its host
  // Seals the setup messages on the connection (always) and then its data frames (with
  // Integrity::Hmac or Gmac): keyed from the handshake's session key.
  std::unique_ptr<FrameSeal> seal;
};
// A link to `peer` over an authenticated connection with this session key.
PeerLink make_link(const CommConfig& o, net::Socket sock, const PeerInfo& peer,
                   const net::SessionKey& session);
// The seal the pair's data frames carry: the link's unless Integrity::None, else none.
std::unique_ptr<FrameSeal> data_seal(const CommConfig& o, PeerLink& link);

// The host identity this rank states: CommConfig::host_id, or the one it detects.
const std::string& this_host(const CommConfig& o);

// Length-prefixed setup messages on a link's connection (at most 512 bytes), each followed by its
// tag (frame_seal.h): ProtocolError naming `peer` on a longer one, IntegrityError on a message
// whose tag is wrong (changed on the way, or from someone without the job's token).
void send_setup_message(PeerLink& link, const std::string& text, Deadline deadline);
std::string recv_setup_message(PeerLink& link, int peer, Deadline deadline);

// Connects to rank j (once its address is published) and authenticates, stating `me`. A
// connection that the other side closes during the handshake (busy with too many others, or it
// refused a duplicate) is tried again until the deadline; a wrong token is not (AuthError).
// StallError(j) at the deadline; ProtocolError if the peer is not rank j of this world.
PeerLink dial_peer(store::Store& store, const CommConfig& o, const std::string& me, int j,
                   Deadline deadline);

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

// The pair over one new connection to `peer` (made on first use): on one host, when both would,
// the higher rank creates a segment and offers it, the lower opens it and answers, as in
// make_pairs; otherwise TCP. `local_pairs`: about how many shared-memory pairs this host holds
// (what bounds each ring).
std::unique_ptr<transport::Pair> make_pair(const CommConfig& o, int peer, PeerLink& link,
                                           uint64_t local_pairs, Deadline deadline);

// The ring size of each direction of a shared-memory pair on a host of `local_ranks` ranks: the
// largest power of two that keeps every segment of the host within shm_host_bytes, at most
// shm_ring_bytes and at least 64 KiB.
size_t shm_ring_bytes_for(const CommConfig& o, int local_ranks);
// The same for a host of `pairs` shared-memory pairs.
size_t shm_ring_bytes_for_pairs(const CommConfig& o, uint64_t pairs);

}  // namespace cohort::comm
