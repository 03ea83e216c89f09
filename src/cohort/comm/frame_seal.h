// Integrity of the data plane (CommConfig::integrity = Integrity::Hmac): every frame a pair
// carries after its handshake is followed by a tag, HMAC-SHA256 over
//
//     frame number | WireHeader | payload
//
// under a key of its own for each direction of each pair, derived from the connection's session
// key (net/handshake.h), so fresh for every connection and thus for every communicator and every
// membership epoch. The frame number counts the frames of that direction (0, 1, 2, ...) and is
// not sent: both ends count, so a frame that is dropped, replayed, reordered or moved to another
// pair or direction fails its check like one whose bytes were changed. The receiver checks the
// tag before the frame's data is used (reduced, stashed or handed to the caller): whoever sits on
// the path between two ranks without the job's token can make an operation fail, never make it
// compute with bytes of their choosing.
//
// One thread at a time uses a seal (the thread running the operation in flight on its pair).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "cohort/net/handshake.h"

namespace cohort::comm {

using FrameTag = std::array<uint8_t, 32>;

// One direction: a keyed HMAC-SHA256 and the number of the next frame.
class FrameMac {
 public:
  explicit FrameMac(const net::SessionKey& key);
  ~FrameMac();
  FrameMac(const FrameMac&) = delete;
  FrameMac& operator=(const FrameMac&) = delete;

  // Starts the next frame's tag with its number and header.
  void begin(const void* header, size_t n);
  void update(const void* p, size_t n);
  // The tag of the frame begun last; the next frame gets the next number.
  FrameTag finish();

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
  uint64_t frame_ = 0;
};

// Both directions of one pair: this rank to `peer` and `peer` to this rank.
class FrameSeal {
 public:
  FrameSeal(const net::SessionKey& session, int rank, int peer);
  FrameMac& send() { return send_; }
  FrameMac& recv() { return recv_; }

 private:
  FrameMac send_;
  FrameMac recv_;
};

// The key of the frames `from` sends to `to` over a connection with this session key.
net::SessionKey frame_key(const net::SessionKey& session, int from, int to);

// Constant time.
bool tags_equal(const FrameTag& a, const FrameTag& b);

}  // namespace cohort::comm
