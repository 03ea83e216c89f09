// The collective algorithms. Each runs on the communication thread, moves data with exchange()
// and reduces with reduce(); each lives in its own file with its schedule described above it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "cohort/base/clock.h"
#include "cohort/base/dtype.h"
#include "cohort/comm/encoding.h"
#include "cohort/comm/exchange.h"
#include "cohort/comm/mesh.h"
#include "cohort/comm/plan.h"
#include "cohort/comm/reduce.h"
#include "cohort/comm/types.h"

namespace cohort::comm {

// Everything an algorithm needs for one operation.
//
// An algorithm runs among ranks 0 .. size() - 1 of its context and names its peers by those
// numbers. A context may stand for a group of the mesh's ranks (within()): then member i is mesh
// rank members[i], and run() translates, so every algorithm runs unchanged over a group (the
// hierarchical allreduce runs the ring within a host and any algorithm across hosts this way).
// Errors still name mesh ranks.
struct OpContext {
  Mesh& mesh;
  Counters& counters;
  OpId id;
  Deadline deadline;
  size_t chunk_bytes;             // pipeline segment size
  std::vector<uint8_t>& scratch;  // reusable temporary memory, grown on demand
  size_t ring_window = 0;         // segments per step in each round of a ring (0: a whole block)
  Spin spin{};                    // how long a wait polls before it sleeps (exchange())
  size_t fold_bytes = 0;          // segments folded in place from as many bytes (exchange())
  const std::vector<int>* members = nullptr;  // mesh ranks of the group; null: the whole mesh
  int member_index = 0;                       // this rank's place in *members
  // Set: the operation is planned, not run (plan.h): run() and the kernels below report to it.
  PlanSink* plan = nullptr;

  int rank() const { return members ? member_index : mesh.rank(); }
  int size() const { return members ? static_cast<int>(members->size()) : mesh.size(); }
  // The mesh rank of member i.
  int mesh_rank(int i) const { return members ? (*members)[static_cast<size_t>(i)] : i; }
  // The same operation among `group` (mesh ranks, this rank among them), which must outlive the
  // returned context; members are numbered in the order given.
  OpContext within(const std::vector<int>& group) const;
  uint8_t* scratch_bytes(size_t n) {
    if (scratch.size() < n) scratch.resize(n);
    return scratch.data();
  }
  void run(SendPlan* send, RecvPlan* recv);
  // The reduction kernels (reduce.h), as every algorithm calls them.
  void reduce(DType dtype, ReduceOp op, void* dst, const void* a, const void* b,
              size_t count) const {
    if (plan) {
      plan->work(WorkKind::Reduce, count * dtype_size(dtype));
    } else {
      comm::reduce(dtype, op, dst, a, b, count);
    }
  }
  void divide(DType dtype, void* data, size_t count, int divisor) const {
    if (plan) {
      plan->work(WorkKind::Divide, count * dtype_size(dtype));
    } else {
      comm::divide(dtype, data, count, divisor);
    }
  }
  // Elements per pipeline segment for this operation's dtype (at least one).
  size_t segment_elems() const {
    size_t n = chunk_bytes / dtype_size(id.dtype);
    return n ? n : 1;
  }
};

inline size_t ceil_div(size_t a, size_t b) {
  return (a + b - 1) / b;
}
// (a mod n) for a possibly negative a.
inline int wrap(int a, int n) {
  return ((a % n) + n) % n;
}

// A contiguous element range [off, off + len) of a buffer cut into pipeline segments.
struct SegmentedRange {
  uint8_t* base;
  size_t elem_size;
  size_t off;
  size_t len;
  size_t seg;  // elements per segment
  size_t count() const { return ceil_div(len, seg); }
  Segment at(size_t i) const {
    size_t start = i * seg;
    size_t n = std::min(seg, len - start);
    return Segment{base + (off + start) * elem_size, n * elem_size};
  }
};

// The order in which a ring sends (and receives) its steps x segments. Each of `steps` steps
// moves one block of `segments` segments. Rounds of `window` segments run through every step
// before the next round starts: step s of segment k forwards what step s - 1 of segment k
// brought, so it waits `window` segments after its data arrived instead of a whole block, and that
// data is still in the CPU caches when it goes out again. window >= segments (or 0) is the plain
// step-by-step order.
struct RingOrder {
  size_t steps;
  size_t segments;
  size_t window;

  RingOrder(size_t steps_, size_t segments_, size_t window_)
      : steps(steps_),
        segments(segments_),
        window(window_ == 0 || window_ > segments_ ? segments_ : window_) {}
  size_t count() const { return steps * segments; }
  // Step and segment of item i.
  void at(size_t i, size_t* step, size_t* segment) const {
    const Place p = place(i);
    *step = p.j / p.width;
    *segment = p.first + p.j % p.width;
  }
  // Items that must have been received before item i may be sent: step s of a segment forwards
  // step s - 1 of it, received `width` items earlier in the same order.
  size_t needs(size_t i) const {
    const Place p = place(i);
    return p.j < p.width ? 0 : i - p.width + 1;
  }

 private:
  // Item i is item j of the round whose segments are [first, first + width).
  struct Place {
    size_t first, width, j;
  };
  Place place(size_t i) const {
    const size_t round = i / (steps * window), first = round * window;
    return {first, std::min(window, segments - first), i - round * steps * window};
  }
};

// Element ranges of `parts` nearly equal blocks of `count` elements: block b is
// [offset(b), offset(b + 1)); the first count % parts blocks get one extra element.
struct Blocks {
  size_t count;
  size_t parts;
  size_t offset(size_t b) const {
    size_t base = count / parts, extra = count % parts;
    return b * base + (b < extra ? b : extra);
  }
  size_t length(size_t b) const { return offset(b + 1) - offset(b); }
};

// Auto uses recursive doubling up to this many bytes (see allreduce_auto.cc).
inline constexpr size_t kRecursiveDoublingMaxBytes = size_t{32} << 10;
// On one host over shared memory, Auto uses the ring from this many bytes on (see
// allreduce_auto.cc).
inline constexpr size_t kSharedMemoryRingMinBytes = size_t{1} << 20;

// On one host over shared memory, with more ranks on some host than this many per CPU, Auto keeps
// halving-doubling above the ring's minimum too (see allreduce_auto.cc).
inline constexpr int kSharedMemoryRingMaxRanksPerCpu = 32;

// What Auto weighs besides the size of the buffer: how many ranks, on how many hosts, the most
// crowded of which holds max_local of them, whether pairs of ranks on one host talk over shared
// memory, and how many ranks share each CPU on the most crowded host.
struct WorldShape {
  int size = 1;
  int hosts = 1;
  int max_local = 1;
  bool shared_memory = false;
  int ranks_per_cpu = 1;  // Mesh::ranks_per_cpu: more than 1 where a host has more ranks than CPUs
  bool crowded() const { return ranks_per_cpu > 1; }
};
// Which allreduce algorithm Auto picks for `bytes` on `world`.
Algorithm choose_allreduce(size_t bytes, const WorldShape& world);

// Runs the allreduce `algo` (not Auto: choose_allreduce picks for it), as the communicator does.
void allreduce_with(OpContext& ctx, Buffer buf, ReduceOp op, Algorithm algo);
void allreduce_ring(OpContext& ctx, Buffer buf, ReduceOp op);
// Steps [first, first + count) of the ring allreduce's 2(n - 1): its reduce-scatter is steps
// 0 .. n - 2 (after it rank r holds the reduction of block (r + 1) mod n of Blocks{count, n}), its
// allgather steps n - 1 .. 2n - 3. Avg divides only when the reduce-scatter's last step is run.
void ring_steps(OpContext& ctx, Buffer buf, ReduceOp op, int first, int count);
void allreduce_hierarchical(OpContext& ctx, Buffer buf, ReduceOp op);
// Runs the flat allreduce `algo` (not Auto, not Hierarchical).
void allreduce_flat(OpContext& ctx, Buffer buf, ReduceOp op, Algorithm algo);
void allreduce_halving_doubling(OpContext& ctx, Buffer buf, ReduceOp op);
void allreduce_recursive_doubling(OpContext& ctx, Buffer buf, ReduceOp op);
void allreduce_linear(OpContext& ctx, Buffer buf, ReduceOp op);
// Receives `peer`'s copy of the whole buffer `whole` (of `buf`) and reduces it in as it arrives:
// each element becomes op(mine, theirs) when mine_first, else op(theirs, mine). A segment that is
// not folded straight out of the transport lands in `scratch` at its offset in the buffer.
RecvPlan fold_whole(OpContext& ctx, Buffer buf, const SegmentedRange& whole, uint8_t* scratch,
                    ReduceOp op, int peer, bool mine_first);
void reduce_scatter_ring(OpContext& ctx, Buffer in, Buffer out, ReduceOp op);
void allgather_ring(OpContext& ctx, Buffer in, Buffer out);
void allreduce_encoded(OpContext& ctx, Buffer buf, Encoding& encoding, ReduceOp op,
                       Buffer residual);
void allgatherv_ring(OpContext& ctx, Buffer in, GatheredBlocks* out);
// allgatherv_ring's second phase, once every rank's count is known: block b (counts[b] elements
// at offsets[b] of `out`, which holds them all) goes around the ring; `in` is this rank's block.
// (The simulator plans top-k's exchange with it, the counts being known there.)
void allgatherv_blocks(OpContext& ctx, Buffer in, const std::vector<size_t>& counts,
                       const std::vector<size_t>& offsets, uint8_t* out);
void broadcast(OpContext& ctx, Buffer buf, int root);
void barrier(OpContext& ctx);
// rooted.cc: the root's buf ends with the reduction; the others' is left as it was.
void reduce_to_root(OpContext& ctx, Buffer buf, ReduceOp op, int root);
// out (the root's only) holds size() blocks of in.count elements, block r from rank r.
void gather_to_root(OpContext& ctx, Buffer in, Buffer out, int root);
// in (the root's only) holds size() blocks of out.count elements, block r for rank r.
void scatter_from_root(OpContext& ctx, Buffer in, Buffer out, int root);
// Elements, per peer: what this rank sends to and receives from each rank, and where.
struct AllToAllLayout {
  std::vector<size_t> send_counts, send_offsets, recv_counts, recv_offsets;
};
void all_to_all(OpContext& ctx, Buffer in, Buffer out, const AllToAllLayout& layout);
// A send's or a recv's message (point_to_point.cc); `peer` in the operation's numbering.
struct Message {
  Buffer buf;
  int peer = -1;
  uint32_t tag = 0;
};
// The message `recv` wants, if it arrived before the recv was issued: copied to its buffer (true).
// ProtocolError when its type or size is not the recv's.
bool take_stashed(OpContext& ctx, const Message& recv);
// Sends (`sends`) or receives `m`, taking on, while it waits alone, the message of the other
// direction that join() offers (one that outlives the call; null: none yet), as exchange_messages
// in exchange.h does. False when that one had not begun when `m` was done, and was left.
bool run_message(OpContext& ctx, const Message& m, bool sends,
                 const std::function<const Message*()>& join = {});

}  // namespace cohort::comm
