// The schedule of one collective on every rank of a world, as the communicator's own algorithms
// lay it out: each rank's algorithm is run over a mesh that carries nothing, with a PlanSink
// (comm/plan.h) that writes down every exchange - its peers, the size of each segment and what
// each segment waits for - and the local work between and inside them, instead of doing any of it.
// What the simulator times is therefore the real schedule, not a formula for it.
//
// Segments come in runs: consecutive segments of one stream with the same size, the same
// work and the same kind of gate are one Run, so a ring of thousands of ranks, whose streams are
// a few runs each, takes little memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cohort/comm/encoding.h"
#include "cohort/comm/plan.h"
#include "cohort/comm/types.h"

namespace cohort::sim {

// A gate on item i of a stream: the count of items of the other stream of the same exchange that
// it waits for. Send items wait for received items whose work is done; received items' work waits
// for sent items. Relative: max(0, i + offset) (a pipeline lag); else `offset` itself.
struct Gate {
  bool relative = false;
  int64_t offset = 0;
  uint64_t at(uint64_t i) const {
    if (!relative) return static_cast<uint64_t>(offset < 0 ? 0 : offset);
    const int64_t v = static_cast<int64_t>(i) + offset;
    return v < 0 ? 0 : static_cast<uint64_t>(v);
  }
  bool operator==(const Gate&) const = default;
};

// `count` consecutive items of one stream alike.
struct Run {
  uint64_t count = 0;
  uint64_t bytes = 0;  // of each item
  Gate gate;
  double work_s = 0;  // received items: core-seconds of work once the item is in (on_segment)
};

// One exchange of one rank: a stream of segments to one peer and one from another (or none).
struct Exchange {
  int send_to = -1;    // -1: nothing sent
  int recv_from = -1;  // -1: nothing received
  std::vector<Run> send;
  std::vector<Run> recv;
  double work_before_s = 0;  // local work the algorithm does before this exchange starts
};

struct RankPlan {
  std::vector<Exchange> exchanges;
  double work_after_s = 0;  // local work after the last exchange
  uint64_t bytes_sent = 0;  // payload, all exchanges
};

// Core-seconds of `bytes` of work of a kind (the calibrated kernels' cost).
using WorkCost = std::function<double(comm::WorkKind kind, size_t bytes)>;

// What is planned: an allreduce of `count` elements of `dtype` with an algorithm (Auto chooses as
// the communicator does), or with `encoding` the compressed allreduce of f32 in that format, or an
// allgather of `count` elements from every rank (top-k's exchange). Segment size and ring window
// as in CommConfig.
struct CollectiveSpec {
  // Allgatherv: count elements from every rank, gathered as top-k's codec gathers its blocks
  // (comm::allgatherv_ring: the counts first, then the blocks around the ring).
  enum class Kind { Allreduce, EncodedAllreduce, Allgatherv };
  Kind kind = Kind::Allreduce;
  comm::Algorithm algorithm = comm::Algorithm::Auto;
  size_t count = 0;
  DType dtype = DType::F32;
  const comm::Encoding* encoding = nullptr;  // EncodedAllreduce: sizes and wire tag of the format
  size_t chunk_bytes = 256 << 10;
  size_t ring_window = 1;
  bool shared_memory = false;  // pairs within a host talk over shared memory (Auto weighs it)
  int cores = 0;  // of each host: one with more ranks is crowded (Auto weighs it); 0: no limit
};

// The algorithm an allreduce of `bytes` resolves to on this world (Auto's choice, else as given),
// with `cores` CPUs on each host (0: no limit), as the communicator decides it.
comm::Algorithm resolve_algorithm(comm::Algorithm algorithm, size_t bytes,
                                  const std::vector<int>& host_of, bool shared_memory, int cores);

// Every rank's plan for `spec` on a world whose rank r is on host host_of[r] (hosts numbered in
// the order of their lowest rank). Throws Error for a world or spec the algorithms refuse.
std::vector<RankPlan> plan_collective(const CollectiveSpec& spec, const std::vector<int>& host_of,
                                      const WorkCost& cost);

}  // namespace cohort::sim
