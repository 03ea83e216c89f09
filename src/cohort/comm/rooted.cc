// The collectives with a root, and all-to-all.
//
// reduce: a binomial tree towards the root. With ranks renumbered v = (r - root) mod n, at step
//   d = 1, 2, 4, ... a rank whose bit d is set sends its partial result to v - d and is done; the
//   others receive v + d's (if it exists) and reduce it into theirs, segment by segment as the
//   segments arrive. log2(n) steps; the root ends with the reduction of every rank's buffer, the
//   other ranks' buffers are left as they were (they reduce into a copy).
// gather / scatter: the root receives (sends) every other rank's block in turn, straight into
//   (out of) its place in the root's buffer, pipelined in segments.
// all_to_all: n - 1 rounds of a full-duplex exchange; in round k rank r sends its block for
//   r + k and receives the block of r - k, so every pair's two directions move at once.
#include <cstring>

#include "cohort/comm/algorithms.h"
#include "cohort/comm/reduce.h"

namespace cohort::comm {

namespace {

SegmentedRange range_of(OpContext& ctx, uint8_t* base, DType dtype, size_t off, size_t len) {
  return SegmentedRange{base, dtype_size(dtype), off, len, ctx.segment_elems()};
}

}  // namespace

void reduce_to_root(OpContext& ctx, Buffer buf, ReduceOp op, int root) {
  const int n = ctx.size();
  if (buf.count == 0) return;
  const int v = wrap(ctx.rank() - root, n);
  auto real_rank = [&](int x) { return wrap(x + root, n); };
  const size_t bytes = buf.bytes();
  // The root reduces into its buffer; the other ranks that receive (even v) into a copy; the
  // leaves (odd v) only send theirs. What arrives lands in the second half of the scratch.
  uint8_t* scratch = ctx.scratch_bytes(2 * bytes);
  const bool copy = v != 0 && (v & 1) == 0;
  uint8_t* acc = copy ? scratch : buf.byte_ptr();
  uint8_t* incoming = scratch + bytes;
  if (copy) std::memcpy(acc, buf.data, bytes);
  const SegmentedRange mine = range_of(ctx, acc, buf.dtype, 0, buf.count);
  const SegmentedRange theirs = range_of(ctx, incoming, buf.dtype, 0, buf.count);
  for (int d = 1; d < n; d *= 2) {
    if (v & d) {
      SendPlan send{.peer = real_rank(v - d), .count = mine.count(), .segment = [&](size_t i) {
                      return mine.at(i);
                    }};
      ctx.run(&send, nullptr);
      return;
    }
    if (v + d >= n) continue;
    RecvPlan recv{.peer = real_rank(v + d),
                  .count = theirs.count(),
                  .segment =
                      [&](size_t i) {
                        const Segment s = theirs.at(i);
                        return Segment{s.data, s.bytes, /*fold=*/true};
                      },
                  .fold =
                      [&](size_t i, size_t at, const uint8_t* bytes, size_t n) {
                        uint8_t* dst = mine.at(i).data + at;
                        ctx.reduce(buf.dtype, op, dst, dst, bytes, n / dtype_size(buf.dtype));
                      }};
    ctx.run(nullptr, &recv);
  }
  if (op == ReduceOp::Avg) ctx.divide(buf.dtype, buf.data, buf.count, n);
}

void gather_to_root(OpContext& ctx, Buffer in, Buffer out, int root) {
  const int n = ctx.size(), me = ctx.rank();
  const size_t m = in.count;
  if (me != root) {
    if (m == 0) return;
    const SegmentedRange mine = range_of(ctx, in.byte_ptr(), in.dtype, 0, m);
    SendPlan send{
        .peer = root, .count = mine.count(), .segment = [&](size_t i) { return mine.at(i); }};
    ctx.run(&send, nullptr);
    return;
  }
  if (m == 0) return;
  std::memmove(out.byte_ptr() + static_cast<size_t>(me) * in.bytes(), in.data, in.bytes());
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    const SegmentedRange block =
        range_of(ctx, out.byte_ptr(), out.dtype, static_cast<size_t>(r) * m, m);
    RecvPlan recv{
        .peer = r, .count = block.count(), .segment = [&](size_t i) { return block.at(i); }};
    ctx.run(nullptr, &recv);
  }
}

void scatter_from_root(OpContext& ctx, Buffer in, Buffer out, int root) {
  const int n = ctx.size(), me = ctx.rank();
  const size_t m = out.count;
  if (m == 0) return;
  if (me != root) {
    const SegmentedRange mine = range_of(ctx, out.byte_ptr(), out.dtype, 0, m);
    RecvPlan recv{
        .peer = root, .count = mine.count(), .segment = [&](size_t i) { return mine.at(i); }};
    ctx.run(nullptr, &recv);
    return;
  }
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    const SegmentedRange block =
        range_of(ctx, in.byte_ptr(), in.dtype, static_cast<size_t>(r) * m, m);
    SendPlan send{
        .peer = r, .count = block.count(), .segment = [&](size_t i) { return block.at(i); }};
    ctx.run(&send, nullptr);
  }
  std::memmove(out.data, in.byte_ptr() + static_cast<size_t>(me) * out.bytes(), out.bytes());
}

void all_to_all(OpContext& ctx, Buffer in, Buffer out, const AllToAllLayout& layout) {
  const int n = ctx.size(), me = ctx.rank();
  const size_t es = dtype_size(in.dtype);
  const auto u = [](int r) { return static_cast<size_t>(r); };
  std::memmove(out.byte_ptr() + layout.recv_offsets[u(me)] * es,
               in.byte_ptr() + layout.send_offsets[u(me)] * es, layout.send_counts[u(me)] * es);
  for (int k = 1; k < n; ++k) {
    const int to = wrap(me + k, n), from = wrap(me - k, n);
    const SegmentedRange outgoing = range_of(ctx, in.byte_ptr(), in.dtype,
                                             layout.send_offsets[u(to)], layout.send_counts[u(to)]);
    const SegmentedRange incoming = range_of(
        ctx, out.byte_ptr(), out.dtype, layout.recv_offsets[u(from)], layout.recv_counts[u(from)]);
    SendPlan send{
        .peer = to, .count = outgoing.count(), .segment = [&](size_t i) { return outgoing.at(i); }};
    RecvPlan recv{.peer = from, .count = incoming.count(), .segment = [&](size_t i) {
                    return incoming.at(i);
                  }};
    ctx.run(send.count ? &send : nullptr, recv.count ? &recv : nullptr);
  }
}

}  // namespace cohort::comm
