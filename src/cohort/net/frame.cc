#include "cohort/net/frame.h"

#include <sys/uio.h>

#include <cstdio>
#include <cstring>

#include "cohort/base/error.h"

namespace cohort::net {

void check_header(const FrameHeader& h, size_t max_length) {
  if (h.magic != kFrameMagic) {
    throw ProtocolError("bad frame magic 0x" + [&] {
      char buf[16];
      snprintf(buf, sizeof(buf), "%08x", h.magic);
      return std::string(buf);
    }());
  }
  if (h.version != kWireVersion) {
    throw ProtocolError("unsupported wire version " + std::to_string(h.version) + " (expected " +
                        std::to_string(kWireVersion) + ")");
  }
  if (h.length > max_length) {
    throw ProtocolError("frame of " + std::to_string(h.length) + " bytes exceeds the limit of " +
                        std::to_string(max_length));
  }
}

void write_frame(Socket& s, MsgType type, const void* payload, size_t n, Deadline deadline) {
  FrameHeader h;
  h.type = static_cast<uint16_t>(type);
  h.length = n;
  // Small frames go out in one send so the header and payload share a segment.
  if (n <= 4096) {
    uint8_t buf[kFrameHeaderBytes + 4096];
    std::memcpy(buf, &h, kFrameHeaderBytes);
    if (n) std::memcpy(buf + kFrameHeaderBytes, payload, n);
    s.send_all(buf, kFrameHeaderBytes + n, deadline);
    return;
  }
  s.send_all(&h, kFrameHeaderBytes, deadline);
  s.send_all(payload, n, deadline);
}

Frame read_frame(Socket& s, Deadline deadline, size_t max_length) {
  FrameHeader h;
  s.recv_all(&h, kFrameHeaderBytes, deadline);
  check_header(h, max_length);
  Frame f;
  f.type = h.type;
  f.payload.resize(h.length);
  if (h.length) s.recv_all(f.payload.data(), h.length, deadline);
  return f;
}

Frame read_frame_of(Socket& s, MsgType expected, Deadline deadline, size_t max_length) {
  Frame f = read_frame(s, deadline, max_length);
  if (f.type != static_cast<uint16_t>(expected)) {
    throw ProtocolError("unexpected message type " + std::to_string(f.type) + " (expected " +
                        std::to_string(static_cast<uint16_t>(expected)) + ")");
  }
  return f;
}

}  // namespace cohort::net
