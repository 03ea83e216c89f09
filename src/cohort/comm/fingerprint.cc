// check_collectives: before any data moves, every rank compares the collective it issued under
// this sequence number with every other rank's.
#include "cohort/comm/tcp_communicator.h"

namespace cohort::comm {
namespace {

// A collective's fingerprint on the wire: what every rank must agree on before data moves.
struct Fingerprint {
  int64_t seq, kind, dtype, count, detail, algorithm;
  bool operator==(const Fingerprint&) const = default;
};
static_assert(sizeof(Fingerprint) == 6 * sizeof(int64_t));

std::string describe_fingerprint(const Fingerprint& f) {
  const auto kind = static_cast<OpKind>(f.kind);
  std::string s = std::string(op_kind_name(kind)) + " #" + std::to_string(f.seq) + " of " +
                  std::to_string(f.count) + " " +
                  std::string(dtype_name(static_cast<DType>(f.dtype)));
  if (kind == OpKind::Allreduce || kind == OpKind::ReduceScatter) {
    s += ", " + std::string(reduce_op_name(static_cast<ReduceOp>(f.detail)));
  }
  if (kind == OpKind::Allreduce) {
    s += ", " + std::string(algorithm_name(static_cast<Algorithm>(f.algorithm)));
  }
  if (kind == OpKind::Broadcast || kind == OpKind::Scatter) {
    s += " from root " + std::to_string(f.detail);
  }
  if (kind == OpKind::Gather) s += " to root " + std::to_string(f.detail);
  if (kind == OpKind::Reduce) {
    s += ", " + std::string(reduce_op_name(static_cast<ReduceOp>(f.detail & 0xff))) + " to root " +
         std::to_string(f.detail >> 8);
  }
  return s;
}

}  // namespace

void TcpCommunicator::check_fingerprint(OpContext& ctx, const Op& op) {
  const int n = size(), me = rank();
  Fingerprint mine{static_cast<int64_t>(op.id.seq),
                   static_cast<int64_t>(op.id.kind),
                   static_cast<int64_t>(op.id.dtype),
                   static_cast<int64_t>(op.count),
                   op.detail,
                   static_cast<int64_t>(op.algorithm)};
  std::vector<Fingerprint> theirs(static_cast<size_t>(n));
  // The exchange runs under an id of its own, so a peer that issued a different operation under
  // this sequence number still reads this message as a fingerprint.
  const OpId fid{.kind = OpKind::Barrier, .seq = op.id.seq, .dtype = DType::I64};
  for (int d = 1; d < n; ++d) {
    const int to = (me + d) % n, from = (me - d + n) % n;
    SendPlan send{.peer = to, .count = 1, .segment = [&](size_t) {
                    return Segment{reinterpret_cast<uint8_t*>(&mine), sizeof(mine)};
                  }};
    RecvPlan recv{.peer = from, .count = 1, .segment = [&](size_t) {
                    return Segment{reinterpret_cast<uint8_t*>(&theirs[static_cast<size_t>(from)]),
                                   sizeof(Fingerprint)};
                  }};
    exchange(ctx.mesh, ctx.counters, fid, &send, &recv, ctx.deadline);
  }
  for (int r = 0; r < n; ++r) {
    if (r == me || theirs[static_cast<size_t>(r)] == mine) continue;
    throw CollectiveMismatchError(
        op.id.seq, r,
        "collective mismatch at sequence number " + std::to_string(op.id.seq) + ": rank " +
            std::to_string(me) + " called " + describe_fingerprint(mine) + " but rank " +
            std::to_string(r) + " called " + describe_fingerprint(theirs[static_cast<size_t>(r)]));
  }
}

}  // namespace cohort::comm
