// Linear allreduce: every rank sends its whole buffer to rank 0, which reduces them in rank order
// and sends the result back to each (Open MPI's "basic linear"; the gather and release of
// shared-memory collectives).
//
// It is the schedule for a small message on a host with many more ranks than CPUs. There every
// step of a schedule whose ranks wait for each other (recursive doubling: log2(n) of them) costs
// a turn of the CPU for each rank, since the partner whose data a rank waits for is usually not
// running. Here a rank other than 0 sends (its data waits in the pair's ring; it does not wait for
// rank 0 to read it) and then sleeps until the result comes: two turns of the CPU in all, while
// rank 0 reduces everything as it arrives. Rank 0 does n - 1 times the work of any other rank, so
// with a CPU for every rank, or with many bytes, the schedules that share the work win
// (allreduce_auto.cc).
//
// Bitwise identical results on every rank: only rank 0 reduces, always in rank order, and every
// other rank receives its bytes.
#include "cohort/comm/algorithms.h"

namespace cohort::comm {

void allreduce_linear(OpContext& ctx, Buffer buf, ReduceOp op) {
  const int n = ctx.size(), r = ctx.rank();
  if (n == 1 || buf.count == 0) return;
  const size_t es = dtype_size(buf.dtype);
  const SegmentedRange whole{buf.byte_ptr(), es, 0, buf.count, ctx.segment_elems()};
  auto segment = [&](size_t i) { return whole.at(i); };
  if (r != 0) {
    SendPlan send{.peer = 0, .count = whole.count(), .segment = segment};
    ctx.run(&send, nullptr);
    RecvPlan recv{.peer = 0, .count = whole.count(), .segment = segment};
    ctx.run(nullptr, &recv);
    return;
  }
  uint8_t* scratch = ctx.scratch_bytes(buf.count * es);
  // The reduction of ranks 0 .. peer - 1 first, rank `peer`'s data second.
  for (int peer = 1; peer < n; ++peer) {
    RecvPlan recv = fold_whole(ctx, buf, whole, scratch, op, peer, /*mine_first=*/true);
    ctx.run(nullptr, &recv);
  }
  if (op == ReduceOp::Avg) ctx.divide(buf.dtype, buf.byte_ptr(), buf.count, n);
  for (int peer = 1; peer < n; ++peer) {
    SendPlan send{.peer = peer, .count = whole.count(), .segment = segment};
    ctx.run(&send, nullptr);
  }
}

}  // namespace cohort::comm
