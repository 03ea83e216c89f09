// Framed messages: every message on a Cohort connection starts with a 16-byte header
//   magic u32 "CHRT" | version u16 | type u16 | length u64
// and the length is checked against the receiver's limit before any memory is allocated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cohort/base/clock.h"
#include "cohort/net/socket.h"

namespace cohort::net {

inline constexpr uint32_t kFrameMagic = 0x54524843;  // "CHRT" little-endian
inline constexpr uint16_t kWireVersion = 1;
inline constexpr size_t kFrameHeaderBytes = 16;
// Default cap for control messages; data paths pass their own limit.
inline constexpr size_t kDefaultMaxFrame = 64u << 20;

// Message types. Ranges: 1-15 handshake, 16-63 store, 64-127 communicator, 128-159 coordinator,
// 160-191 parameter servers.
enum class MsgType : uint16_t {
  kHello = 1,
  kChallenge = 2,
  kResponse = 3,
  kAccept = 4,
  kReject = 5,
  kStoreRequest = 16,
  kStoreResponse = 17,
  kCommData = 64,
  kPsRequest = 160,
  kPsResponse = 161,
};

struct FrameHeader {
  uint32_t magic = kFrameMagic;
  uint16_t version = kWireVersion;
  uint16_t type = 0;
  uint64_t length = 0;
};
static_assert(sizeof(FrameHeader) == kFrameHeaderBytes);

struct Frame {
  uint16_t type = 0;
  std::vector<uint8_t> payload;
};

// Validates magic, version and length limit; throws ProtocolError naming what is wrong.
void check_header(const FrameHeader& h, size_t max_length);

void write_frame(Socket& s, MsgType type, const void* payload, size_t n, Deadline deadline);
inline void write_frame(Socket& s, MsgType type, const std::vector<uint8_t>& payload,
                        Deadline deadline) {
  write_frame(s, type, payload.data(), payload.size(), deadline);
}
// Reads one frame. Throws ProtocolError (bad header / oversized), TimeoutError, PeerLostError.
Frame read_frame(Socket& s, Deadline deadline, size_t max_length = kDefaultMaxFrame);
// Reads one frame and requires its type.
Frame read_frame_of(Socket& s, MsgType expected, Deadline deadline,
                    size_t max_length = kDefaultMaxFrame);

}  // namespace cohort::net
