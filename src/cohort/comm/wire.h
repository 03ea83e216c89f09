// The header in front of every block of data a communicator puts on a connection. It lets the
// receiver check that the bytes belong to the operation it is running (same kind, same sequence
// number, same element type and size) before they touch the destination buffer, so ranks that
// issue collectives in different orders fail with a ProtocolError that names both sides.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "cohort/base/dtype.h"

namespace cohort::comm {

enum class OpKind : uint8_t {
  Allreduce = 1,
  ReduceScatter = 2,
  Allgather = 3,
  Broadcast = 4,
  Barrier = 5,
  PointToPoint = 6,      // send/recv: matched by tag and source, not by sequence number
  AllreduceEncoded = 7,  // tag: the Encoding's wire_tag()
  Allgatherv = 8,
  Reduce = 9,
  Gather = 10,
  Scatter = 11,
  AllToAll = 12,
};
inline constexpr OpKind kLastOpKind = OpKind::AllToAll;  // kinds are 1 .. kLastOpKind

std::string_view op_kind_name(OpKind k);

inline constexpr uint32_t kDataMagic = 0x54414443;  // "CDAT" little-endian

struct WireHeader {
  uint32_t magic = kDataMagic;
  uint8_t kind = 0;   // OpKind
  uint8_t dtype = 0;  // DType
  uint16_t reserved = 0;
  uint32_t tag = 0;  // send/recv tag; a collective's format tag (0 for most)
  uint32_t reserved2 = 0;
  uint64_t seq = 0;    // collective sequence number (1, 2, 3, ...); 0 for send/recv
  uint64_t bytes = 0;  // payload bytes that follow
};
static_assert(sizeof(WireHeader) == 32);

// "allreduce #7" or "send/recv (tag 3)".
std::string describe(OpKind kind, uint64_t seq, uint32_t tag = 0);

}  // namespace cohort::comm
