// Options and handles shared by every collective.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cohort/base/dtype.h"
#include "cohort/base/error.h"

namespace cohort::comm {

// Bitwise operations apply to integer and bool data only; Avg to every type but bool
// (check_reduction in reduce.h).
enum class ReduceOp : uint8_t {
  Sum = 0,
  Avg = 1,
  Max = 2,
  Min = 3,
  Product = 4,
  BAnd = 5,
  BOr = 6,
  BXor = 7,
};
enum class Algorithm : uint8_t {
  Auto = 0,
  Ring = 1,
  HalvingDoubling = 2,
  RecursiveDoubling = 3,
  Hierarchical = 4,  // within each host, then across hosts (allreduce_hierarchical.cc)
  Linear = 5,        // to rank 0 and back (allreduce_linear.cc)
};

std::string_view reduce_op_name(ReduceOp op);
std::string_view algorithm_name(Algorithm a);
// "auto" | "ring" | "halving_doubling" | "recursive_doubling" | "hierarchical" | "linear";
// ConfigError otherwise.
Algorithm parse_algorithm(std::string_view s);

// Which transport carries a pair of ranks on one host (pairs on different hosts are always TCP).
// Auto: shared memory where it can be set up, TCP with a warning where not (/dev/shm missing or
// too small); Shm: shared memory or a failed setup; Tcp: never shared memory.
enum class Transport : uint8_t { Auto = 0, Tcp = 1, Shm = 2 };
std::string_view transport_name(Transport t);
// "auto" | "tcp" | "shm"; ConfigError otherwise.
Transport parse_transport(std::string_view s);

// Whether the frames of data between ranks are authenticated (frame_seal.h). None: the handshake
// proves that both ends hold the job's token, and the bytes after it are trusted as they come, as
// on a private network. Hmac and Gmac: every frame also carries a tag under a key of its
// connection, bound to its place in the stream, so nothing on the path can change, inject, replay
// or reorder data unnoticed; it costs a pass over every byte sent and received, of SHA-256 (Hmac)
// or of GHASH (Gmac, AES-256-GMAC: several times faster where the CPU multiplies carry-less).
enum class Integrity : uint8_t { None = 0, Hmac = 1, Gmac = 2 };
std::string_view integrity_name(Integrity i);
// "none" | "hmac" | "gmac"; ConfigError otherwise.
Integrity parse_integrity(std::string_view s);

// A timeout of zero means "the communicator's default".
struct AllreduceOptions {
  ReduceOp op = ReduceOp::Sum;
  Algorithm algorithm = Algorithm::Auto;
  std::chrono::milliseconds timeout{0};
  // The caller will not wait on it soon: the communication thread starts it as soon as what was
  // queued before it is done, however small (no hand-off delay, CommConfig::hand_off_bytes). For
  // a chain of operations that the caller overlaps with its own work (PowerSGD's factors).
  bool prompt = false;
};
struct ReduceScatterOptions {
  ReduceOp op = ReduceOp::Sum;
  std::chrono::milliseconds timeout{0};
};
// allreduce_encoded: Sum or Avg. If `residual` is given (f32, the buffer's element count), it
// receives what this rank's encodings dropped (see allreduce_encoded.cc), for error feedback.
struct EncodedAllreduceOptions {
  ReduceOp op = ReduceOp::Avg;
  Buffer residual = {};
  std::chrono::milliseconds timeout{0};
};
struct BroadcastOptions {
  int root = 0;
  std::chrono::milliseconds timeout{0};
};
struct CollectiveOptions {
  std::chrono::milliseconds timeout{0};
};
struct ReduceOptions {
  ReduceOp op = ReduceOp::Sum;
  int root = 0;
  std::chrono::milliseconds timeout{0};
};
// gather and scatter.
struct RootedOptions {
  int root = 0;
  std::chrono::milliseconds timeout{0};
};
// Empty counts: equal blocks. Otherwise send_counts[r] elements go to rank r and recv_counts[r]
// come from it, each direction's blocks packed in rank order; what rank a sends to b must be
// what b expects from a.
struct AllToAllOptions {
  std::vector<size_t> send_counts;
  std::vector<size_t> recv_counts;
  std::chrono::milliseconds timeout{0};
};
struct PointToPointOptions {
  uint32_t tag = 0;
  std::chrono::milliseconds timeout{0};
};

// A collective did not finish in time. Names the collective, its sequence number and the ranks
// that were not heard from.
class CollectiveTimeoutError : public TimeoutError {
 public:
  CollectiveTimeoutError(std::string collective, uint64_t seq, std::vector<int> ranks,
                         const std::string& what)
      : TimeoutError(what),
        collective_(std::move(collective)),
        seq_(seq),
        ranks_(std::move(ranks)) {}
  const std::string& collective() const { return collective_; }
  uint64_t sequence() const { return seq_; }
  const std::vector<int>& missing_ranks() const { return ranks_; }

 private:
  std::string collective_;
  uint64_t seq_;
  std::vector<int> ranks_;
};

// Ranks issued different collectives under one sequence number (found by check_collectives).
class CollectiveMismatchError : public ProtocolError {
 public:
  CollectiveMismatchError(uint64_t seq, int other_rank, const std::string& what)
      : ProtocolError(what), seq_(seq), other_rank_(other_rank) {}
  uint64_t sequence() const { return seq_; }
  int other_rank() const { return other_rank_; }

 private:
  uint64_t seq_;
  int other_rank_;
};

}  // namespace cohort::comm
