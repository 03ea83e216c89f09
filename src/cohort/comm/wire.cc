#include "cohort/comm/wire.h"

namespace cohort::comm {

std::string_view op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::Allreduce:
      return "allreduce";
    case OpKind::ReduceScatter:
      return "reduce_scatter";
    case OpKind::Allgather:
      return "allgather";
    case OpKind::Broadcast:
      return "broadcast";
    case OpKind::Barrier:
      return "barrier";
    case OpKind::PointToPoint:
      return "send/recv";
    case OpKind::AllreduceEncoded:
      return "allreduce_encoded";
    case OpKind::Allgatherv:
      return "allgatherv";
    case OpKind::Reduce:
      return "reduce";
    case OpKind::Gather:
      return "gather";
    case OpKind::Scatter:
      return "scatter";
    case OpKind::AllToAll:
      return "all_to_all";
  }
  return "unknown operation";
}

std::string describe(OpKind kind, uint64_t seq, uint32_t tag) {
  if (kind == OpKind::PointToPoint) return "send/recv (tag " + std::to_string(tag) + ")";
  return std::string(op_kind_name(kind)) + " #" + std::to_string(seq);
}

}  // namespace cohort::comm
