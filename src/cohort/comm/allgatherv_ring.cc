// Allgather of blocks whose sizes differ from rank to rank (e.g. the sparse gradients of top-k).
//
// First every rank learns every block's element count (a ring allgather of one i64 per rank,
// checked before anything is allocated), then the blocks go around the ring: at step
// s = 0 .. n-2 rank r sends block (r - s) to r + 1 and receives block (r - s - 1) from r - 1
// straight into the output, forwarding at the next step what it has just received.
#include <cstring>

#include "cohort/base/error.h"
#include "cohort/comm/algorithms.h"

namespace cohort::comm {
namespace {
// No rank's block may claim more than this; a larger count is a corrupt or hostile peer.
constexpr uint64_t kMaxGatherBytes = uint64_t{1} << 34;
}  // namespace

void allgatherv_ring(OpContext& ctx, Buffer in, GatheredBlocks* out) {
  const int n = ctx.size(), r = ctx.rank();
  const size_t es = dtype_size(in.dtype);
  std::vector<int64_t> counts(static_cast<size_t>(n), 0);
  counts[static_cast<size_t>(r)] = static_cast<int64_t>(in.count);
  if (n > 1) {
    OpContext sizes = ctx;
    sizes.id.dtype = DType::I64;
    allgather_ring(sizes, Buffer{DType::I64, &counts[static_cast<size_t>(r)], 1},
                   Buffer{DType::I64, counts.data(), static_cast<size_t>(n)});
  }
  uint64_t total = 0;
  for (int b = 0; b < n; ++b) {
    const int64_t c = counts[static_cast<size_t>(b)];
    if (c < 0 || static_cast<uint64_t>(c) > kMaxGatherBytes / es ||
        total + static_cast<uint64_t>(c) > kMaxGatherBytes / es) {
      throw ProtocolError(describe(ctx.id.kind, ctx.id.seq) + ": rank " + std::to_string(b) +
                          " announced a block of " + std::to_string(c) + " elements");
    }
    total += static_cast<uint64_t>(c);
  }
  out->dtype = in.dtype;
  out->counts.assign(static_cast<size_t>(n), 0);
  out->offsets.assign(static_cast<size_t>(n) + 1, 0);
  for (int b = 0; b < n; ++b) {
    out->counts[static_cast<size_t>(b)] = static_cast<size_t>(counts[static_cast<size_t>(b)]);
    out->offsets[static_cast<size_t>(b) + 1] =
        out->offsets[static_cast<size_t>(b)] + out->counts[static_cast<size_t>(b)];
  }
  out->data.resize(static_cast<size_t>(total) * es);
  allgatherv_blocks(ctx, in, out->counts, out->offsets, out->data.data());
}

void allgatherv_blocks(OpContext& ctx, Buffer in, const std::vector<size_t>& counts,
                       const std::vector<size_t>& offsets, uint8_t* out) {
  const int n = ctx.size(), r = ctx.rank();
  const size_t es = dtype_size(in.dtype);
  if (in.count) std::memcpy(out + offsets[static_cast<size_t>(r)] * es, in.data, in.count * es);
  if (n == 1) return;
  const size_t seg = ctx.segment_elems();
  auto block_segment = [&](int b, size_t k) {
    const size_t len = counts[static_cast<size_t>(b)];
    const size_t lo = k * seg, hi = std::min(lo + seg, len);
    return Segment{out + (offsets[static_cast<size_t>(b)] + lo) * es, (hi - lo) * es};
  };
  for (int s = 0; s < n - 1; ++s) {
    const int sb = wrap(r - s, n), rb = wrap(r - s - 1, n);
    SendPlan send{.peer = wrap(r + 1, n),
                  .count = ceil_div(counts[static_cast<size_t>(sb)], seg),
                  .segment = [&](size_t k) { return block_segment(sb, k); }};
    RecvPlan recv{.peer = wrap(r - 1, n),
                  .count = ceil_div(counts[static_cast<size_t>(rb)], seg),
                  .segment = [&](size_t k) { return block_segment(rb, k); }};
    ctx.run(&send, &recv);
  }
}

}  // namespace cohort::comm
