// Frames over non-blocking sockets, for event loops that serve many connections on one thread:
// FrameReader assembles a frame from whatever bytes have arrived, FrameWriter queues frames and
// sends what the socket will take. Neither ever blocks.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "cohort/net/frame.h"
#include "cohort/net/socket.h"

namespace cohort::net {

class FrameReader {
 public:
  // Reads what the socket has, up to the end of the current frame. Returns true once a whole frame
  // is ready: take it with take(). The header is checked against max_length before the payload is
  // allocated (ProtocolError). Throws PeerLostError when the peer closes; mid_frame() then tells a
  // truncated frame from a clean close.
  bool read(Socket& s, size_t max_length);
  Frame take();
  bool mid_frame() const { return header_got_ > 0; }
  // Bytes of the current frame received so far, header included.
  size_t received() const { return header_got_ + payload_got_; }

 private:
  FrameHeader header_{};
  size_t header_got_ = 0;
  bool have_header_ = false;
  std::vector<uint8_t> payload_;
  size_t payload_got_ = 0;
  bool ready_ = false;
};

class FrameWriter {
 public:
  void push(MsgType type, const std::vector<uint8_t>& payload);
  // Sends as much as the socket takes; true when nothing is left. Throws PeerLostError.
  bool flush(Socket& s);
  bool empty() const { return queue_.empty(); }

 private:
  std::deque<std::vector<uint8_t>> queue_;
  size_t front_sent_ = 0;
};

}  // namespace cohort::net
