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
#include "cohort/comm/types.h"

namespace cohort::comm {

// Everything an algorithm needs for one operation.
struct OpContext {
  Mesh& mesh;
  Counters& counters;
  OpId id;
  Deadline deadline;
  size_t chunk_bytes;            // pipeline segment size
  std::vector<uint8_t>& scratch;  // reusable temporary memory, grown on demand

  int rank() const { return mesh.rank(); }
  int size() const { return mesh.size(); }
  uint8_t* scratch_bytes(size_t n) {
    if (scratch.size() < n) scratch.resize(n);
    return scratch.data();
  }
  void run(SendPlan* send, RecvPlan* recv) { exchange(mesh, counters, id, send, recv, deadline); }
  // Elements per pipeline segment for this operation's dtype (at least one).
  size_t segment_elems() const {
    size_t n = chunk_bytes / dtype_size(id.dtype);
    return n ? n : 1;
  }
};

inline size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }
// (a mod n) for a possibly negative a.
inline int wrap(int a, int n) { return ((a % n) + n) % n; }

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
// Which allreduce algorithm Auto picks for `bytes` on `size` ranks.
Algorithm choose_allreduce(size_t bytes, int size);

void allreduce_ring(OpContext& ctx, Buffer buf, ReduceOp op);
void allreduce_halving_doubling(OpContext& ctx, Buffer buf, ReduceOp op);
void allreduce_recursive_doubling(OpContext& ctx, Buffer buf, ReduceOp op);
void reduce_scatter_ring(OpContext& ctx, Buffer in, Buffer out, ReduceOp op);
void allgather_ring(OpContext& ctx, Buffer in, Buffer out);
void allreduce_encoded(OpContext& ctx, Buffer buf, Encoding& encoding, ReduceOp op, Buffer residual);
void allgatherv_ring(OpContext& ctx, Buffer in, GatheredBlocks* out);
void broadcast(OpContext& ctx, Buffer buf, int root);
void barrier(OpContext& ctx);
void send_message(OpContext& ctx, Buffer buf, int dst);
void recv_message(OpContext& ctx, Buffer buf, int src);

}  // namespace cohort::comm
