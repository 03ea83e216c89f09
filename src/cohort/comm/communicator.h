// Communicator: a fixed group of ranks connected to each other over authenticated TCP.
//
// Every collective is asynchronous: it is queued to the communicator's communication thread and
// returns a Work handle at once. Collectives run in issue order and carry a sequence number
// (1, 2, 3, ... on every rank), which is the tag on the wire, so ranks that issue different
// collectives are detected instead of exchanging mismatched data. Every blocking wait has a
// deadline; a timeout names the collective, its sequence number and the ranks not heard from. A
// lost peer fails every pending and future operation with PeerLostError. abort() unblocks all of
// them at once; after an abort or a failure the communicator is dead and must be rebuilt (the
// elastic layer does this for a new membership epoch).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "cohort/base/dtype.h"
#include "cohort/comm/encoding.h"
#include "cohort/comm/flight_recorder.h"
#include "cohort/comm/types.h"
#include "cohort/comm/work.h"
#include "cohort/store/store.h"

namespace cohort::comm {

struct CommConfig {
  int rank = 0;
  int size = 1;
  std::string token;                         // the job's secret; proves membership in handshakes
  std::string bind_host = "127.0.0.1";       // where this rank listens for its peers
  std::string advertise_host;                // what peers dial; defaults to bind_host
  std::chrono::milliseconds timeout{30000};  // default deadline of a collective and of setup
  // Pipeline segment: the reduction of one overlaps the transfer of the next.
  size_t chunk_bytes = 256 << 10;
  // The ring allreduce runs its segments in rounds of this many per step (allreduce_ring.cc): a
  // reduced segment is forwarded this many segments after it arrived, while it is still in the
  // CPU caches. 0: a whole block per step (the textbook order).
  size_t ring_window = 1;
  // SO_SNDBUF/SO_RCVBUF of a TCP data connection between two ranks of one host (0: leave the
  // kernel's autotuning on). Pinned large enough that the segments a step writes fit in the
  // socket while the peer is still writing its own. Loopback, 2 CPUs (AMD EPYC), interleaved
  // rounds, busbw at 1 MiB: 2 ranks 1.6-2.1 GB/s with 256 KiB, 2.7-3.8 with 1 MiB (4 MiB the
  // same), 1.7-2.7 with autotuning; 3 ranks 0.9, 1.1-1.5, 1.1-1.6; 4 ranks alike for all three
  // (BENCHMARKS.md, "Loopback: Cohort's same-host socket buffers").
  int socket_buffer_bytes = 1 << 20;
  // The same for a connection between ranks of different hosts. 0, the default, leaves the
  // kernel's autotuning on, which sizes the buffers to the link's bandwidth-delay product (a
  // buffer pinned at 256 KiB would cap a 25 Gbit/s link with 1 ms of round trip at about
  // 2 Gbit/s); set it only to measure or to bound memory.
  int remote_socket_buffer_bytes = 0;
  // An accepted connection that stays silent this long before it has authenticated is dropped,
  // and so is one still not authenticated after four times this (mesh_doorman.h); a world that
  // connects on first use lengthens both on a host of more than 16 ranks per CPU.
  std::chrono::milliseconds handshake_timeout{3000};
  // Keys this communicator uses in the store: "<prefix>/addr/<rank>" (rendezvous),
  // "<prefix>/failed/<rank>" (why a rank failed, and which rank it blames) and
  // "<prefix>/stuck/<seq>/<rank>" (what a rank waited for when collective #seq timed out). Use a
  // fresh prefix for every communicator built on one store (e.g. one per membership epoch).
  std::string store_prefix = "comm";
  // How many recent collectives the flight recorder keeps (flight_recorder.h).
  size_t flight_recorder_entries = 256;
  // A recorder that outlives this communicator (a worker keeps one across membership epochs, so
  // that its reporter and its step hooks need not follow each new communicator). It is cleared
  // when the communicator starts: sequence numbers begin again at 1. Null: a recorder of its own.
  std::shared_ptr<FlightRecorder> flight_recorder;
  // Before each collective, every rank sends every other rank the collective's fingerprint
  // (operation, element type, count, reduction or root, sequence number) and compares: ranks that
  // issue different collectives fail with CollectiveMismatchError naming both sides, before any
  // data moves. Costs one small message to every peer per collective (and, in a world that
  // connects pairs on first use, a connection to every peer); for debugging.
  bool check_collectives = false;
  // Operations of at most `hand_off_bytes` wait up to a hand-off delay for the thread that waits
  // on them to run them (Work::wait) before the communication thread takes them. A small
  // operation is latency-bound: handing it to another thread and waking the caller afterwards
  // costs two thread wake-ups, more than its transfer. The delay adapts: it starts at
  // `hand_off_delay`; each time the communication thread wakes for operations whose callers had
  // already run them it doubles, up to `hand_off_delay_max`; an operation the communication
  // thread does take (its caller did not wait in time) brings it back to `hand_off_delay`. So
  // callers that wait at once cost that thread a wake-up only every few milliseconds, and a caller
  // that does not sees its operation start within `hand_off_delay_max` at worst, within
  // `hand_off_delay` while it keeps not waiting. Zero delay: the communication thread takes every
  // operation at once.
  size_t hand_off_bytes = 64 << 10;
  std::chrono::microseconds hand_off_delay{200};
  std::chrono::microseconds hand_off_delay_max{3200};
  // An operation of at most `hand_off_bytes` that waits for its sockets polls them for up to
  // `spin_wait` before it sleeps: its peer's reply then costs no thread wake-up. Only when this
  // host has a CPU for each of the ranks on it (counted from the mesh's local connections and
  // this process's CPU affinity, or `host_cpus`); with more ranks than CPUs, spinning would take
  // the CPU from the rank that is to send the data. Zero: never spin. A larger operation's wait
  // on a shared-memory pair polls for the longer of this and `yield_wait`, yielding the CPU
  // between polls: its peer may take longer than this to write the next segment.
  std::chrono::microseconds spin_wait{20};
  // How many CPUs the ranks of this host share among them. Zero: this process's affinity mask,
  // right for ranks that are not bound; a launcher that binds each rank to its own share of the
  // CPUs (base/cpu_binding.h) says how many it shared out, since a rank's own mask then holds
  // only its share.
  int host_cpus = 0;
  // Where this host has fewer CPUs than ranks (no spin_wait), a wait on a shared-memory pair, and
  // an operation of at most `hand_off_bytes` waiting on TCP, polls, calling sched_yield between
  // polls, for up to `yield_wait` before it sleeps: the peer it waits for copies the data (or
  // writes its reply) with its own CPU time, which the yield hands it, and a sleep would cost a
  // doorbell and two context switches per ring's worth of data (measured on 4 ranks over 2 CPUs:
  // 4 KiB allreduce over shared memory 77 µs sleeping, 12 µs yielding for up to 100 µs; over TCP
  // 112-117 µs sleeping, 90-95 µs yielding, and 64 KiB 211-225 against 129-138 µs). Zero: sleep
  // at once.
  std::chrono::microseconds yield_wait{100};
  // send/recv messages that arrive from one peer before their recv is issued are kept for it, up
  // to this many bytes in all (per peer). A peer that sends more before this rank posts the
  // recvs fails the operation in progress with ProtocolError naming it, the tag and the limit,
  // rather than making this rank buffer without bound. The stash fills only while this rank
  // reads that peer's connection for another operation; otherwise nothing is read and the
  // sender waits in its socket buffer (TCP's back-pressure) until the recv comes or its deadline
  // passes.
  size_t p2p_stash_bytes = 64 << 20;
  // What carries a pair of ranks on one host (types.h): under Auto, shared memory
  // (transport/shm_pair.h) where it can be set up. Each direction of a shared-memory pair is a
  // ring of at most `shm_ring_bytes`; the rings of all pairs of a host together stay within
  // `shm_host_bytes` (smaller rings on a host of many ranks, 64 KiB at least), and a /dev/shm
  // without room for a segment leaves that pair on TCP with a warning (Auto) or fails setup (Shm).
  Transport transport = Transport::Auto;
  size_t shm_ring_bytes = 1 << 20;
  size_t shm_host_bytes = 256 << 20;
  // A collective's frame of at least this many bytes between ranks of one host is copied once,
  // by the receiver straight out of the sender's memory (process_vm_readv, shm_pair.h), instead
  // of into the ring and out again. Where the kernel does not allow it, the pair says so once
  // and copies through the ring. Zero, the default: always through the ring, which was faster on
  // every machine measured (BENCHMARKS.md: the kernel's copy between processes ran at a third of
  // memcpy's bandwidth, while a ring of 1 MiB stays in the cache).
  size_t shm_single_copy_bytes = 0;
  // A reduction reads a received segment of at least this many bytes straight out of the
  // shared-memory ring it arrives in, instead of copying it out first and reading the copy
  // (RecvPlan::fold). Measured over shared memory, 2 ranks with a CPU each, f32 sum, interleaved
  // runs, every segment in place or none (median µs of the allreduce, in place / copied first):
  // 4 KiB (one 4 KiB segment) 2.33-2.49 / 2.16-2.26, 64 KiB (32 KiB segments) 7.25-8.69 /
  // 7.15-7.53, 16 MiB (256 KiB segments) 1,524-2,300 / 2,179-2,908: a small segment's freshly
  // written lines come from the peer's cache more slowly to the reduction's loads than to the
  // copy's, and a large segment gains a pass over scratch. Zero: always copy first.
  size_t shm_fold_bytes = 64 << 10;
  // Which host this rank says it is on (at most 128 characters, no spaces). Empty, the default:
  // the identity it detects (transport/host_identity.h). Ranks that state the same one form a host
  // for the hierarchical allreduce and are offered shared memory (which still needs a /dev/shm they
  // truly share: where a segment cannot be opened the pair stays on TCP under Transport::Auto).
  // Like NCCL_HOSTID: to split one machine into hosts of its own choosing (one per NUMA socket, so
  // that the hierarchical allreduce keeps each socket's traffic local), or to group ranks that run
  // in containers of separate network namespaces on one machine.
  std::string host_id;
  // Whether and how data frames are authenticated (types.h, frame_seal.h). Every rank of a
  // communicator must say the same: a rank that does not is refused at setup, naming both.
  Integrity integrity = Integrity::None;
  // Worlds of at most this many ranks connect every pair at setup (a full mesh). Larger ones
  // connect a pair when an operation first needs it (mesh.h), so that a rank holds connections
  // only to the peers its algorithms talk to: a few dozen in a world of 1,024 rather than 1,023.
  int connect_all_up_to = 64;
  // Set by another thread while this communicator is being set up: setup gives up within a
  // fraction of a second (AbortedError) instead of waiting out `timeout` for ranks that will not
  // come (a worker whose membership epoch was superseded while it connected). Only setup reads it.
  std::shared_ptr<const std::atomic<bool>> setup_cancelled;
};

// Totals since the communicator was created (all ranks' own view).
struct CommStats {
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t collectives = 0;
  // How many of this rank's peers each transport carries.
  int shm_pairs = 0;
  int tcp_pairs = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  // Rendezvous through the store, connect to every peer and authenticate. Blocks until all ranks
  // have joined or config.timeout passes (TimeoutError naming the ranks that never joined).
  // The communicator keeps a reference to the store (it reports failures and stuck collectives
  // there so that every rank can name the culprit): the store must outlive it.
  static std::unique_ptr<Communicator> create(store::Store& store, const CommConfig& config);

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In place on buf.
  virtual std::shared_ptr<Work> allreduce(Buffer buf, const AllreduceOptions& opts = {}) = 0;
  // in.count == out.count * size(); rank r receives the reduced block r.
  virtual std::shared_ptr<Work> reduce_scatter(Buffer in, Buffer out,
                                               const ReduceScatterOptions& opts = {}) = 0;
  // out.count == in.count * size(); block r of out is rank r's in.
  virtual std::shared_ptr<Work> allgather(Buffer in, Buffer out,
                                          const CollectiveOptions& opts = {}) = 0;
  // Allreduce (Sum or Avg) of f32 data that travels in `encoding`'s compact format and is summed
  // in f32 (allreduce_encoded.cc): every rank's contribution and the result are each encoded once,
  // and every rank gets the same bits. `encoding` must outlive the operation.
  virtual std::shared_ptr<Work> allreduce_encoded(Buffer buf, Encoding& encoding,
                                                  const EncodedAllreduceOptions& opts = {}) = 0;
  // Allgather of blocks whose sizes differ from rank to rank (all of in's dtype): on completion
  // *out holds every rank's block. `out` must outlive the operation.
  virtual std::shared_ptr<Work> allgatherv(Buffer in, GatheredBlocks* out,
                                           const CollectiveOptions& opts = {}) = 0;
  virtual std::shared_ptr<Work> broadcast(Buffer buf, const BroadcastOptions& opts = {}) = 0;
  virtual std::shared_ptr<Work> barrier(const CollectiveOptions& opts = {}) = 0;
  // The root's buf ends with the reduction of every rank's buf; the others' are unchanged.
  virtual std::shared_ptr<Work> reduce(Buffer buf, const ReduceOptions& opts = {}) = 0;
  // On the root, out.count == in.count * size() and block r of out is rank r's in; elsewhere out
  // is not used.
  virtual std::shared_ptr<Work> gather(Buffer in, Buffer out, const RootedOptions& opts = {}) = 0;
  // On the root, in.count == out.count * size() and rank r receives block r; elsewhere in is not
  // used.
  virtual std::shared_ptr<Work> scatter(Buffer in, Buffer out, const RootedOptions& opts = {}) = 0;
  // Block r of in goes to rank r, block r of out comes from rank r (AllToAllOptions: equal blocks
  // or counts per rank).
  virtual std::shared_ptr<Work> all_to_all(Buffer in, Buffer out,
                                           const AllToAllOptions& opts = {}) = 0;
  virtual std::shared_ptr<Work> send(Buffer buf, int dst, const PointToPointOptions& opts = {}) = 0;
  virtual std::shared_ptr<Work> recv(Buffer buf, int src, const PointToPointOptions& opts = {}) = 0;

  // Subgroups. split() is a collective of this communicator: every rank calls it, in the same
  // order among its other collectives. Ranks that pass the same color >= 0 form a new
  // communicator, numbered there by (key, rank here); a rank passing a negative color joins none
  // and gets null. A subgroup has connections, sequence numbers and a flight recorder of its own,
  // so its collectives may be issued on another thread, in any order relative to this
  // communicator's; either may be destroyed first (the store must outlive both). A subgroup
  // inherits this communicator's configuration, rendezvousing under
  // "<store_prefix>/group/<sequence number of the split>/<color>".
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  // The subgroup of `ranks` (ranks of this communicator, numbered in the new one in the order
  // given), as torch.distributed.new_group: a collective, every rank passes the same list and the
  // ranks not in it get null. ConfigError on a rank out of range, a repeated rank, or ranks that
  // passed different lists (naming one of them).
  virtual std::unique_ptr<Communicator> subgroup(const std::vector<int>& ranks) = 0;

  // Fails every pending operation with AbortedError(reason) and closes all connections.
  virtual void abort(const std::string& reason) = 0;
  virtual CommStats stats() const = 0;

  // This rank's record of its recent collectives and of what it is doing (always on).
  virtual FlightRecorder& flight_recorder() = 0;
  // Fault injection: cuts every connection to the peers as a network failure would, without
  // marking this communicator aborted, so the next operation here and on the peers fails as on a
  // lost peer.
  virtual void cut_connections() = 0;
  // The error that made this communicator fail-stop (an abort, a lost peer, a missed deadline),
  // which every later operation fails with; null while it works.
  virtual std::exception_ptr failure() const = 0;
};

}  // namespace cohort::comm
