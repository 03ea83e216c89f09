// Integrity of the data plane (CommConfig::integrity): every frame a pair carries after its
// handshake is followed by a tag over
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
// Two MACs (both OpenSSL's):
//   HMAC-SHA256 (Integrity::Hmac): 32-byte tags; the frame number is the first bytes it hashes.
//   AES-256-GMAC (Integrity::Gmac): AES-GCM authenticating the frame as associated data, 16-byte
//     tags, the frame number as the 96-bit nonce (unique per key, as GCM requires: a key serves
//     one direction of one connection and the number never repeats on it). GHASH runs on the
//     CPU's carry-less multiply, about eight times the speed of SHA-256 (BENCHMARKS.md).
// The setup messages of a connection (mesh_pairs.h) are always sealed, with HMAC-SHA256 unless
// the data frames use GMAC; they take the first frame numbers.
//
// One thread at a time uses a seal (the thread running the operation in flight on its pair).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "cohort/comm/types.h"
#include "cohort/net/handshake.h"

namespace cohort::comm {

// A tag; the first FrameMac::tag_bytes() bytes are the tag, the rest zero.
using FrameTag = std::array<uint8_t, 32>;

enum class MacAlgorithm : uint8_t { HmacSha256, AesGmac };

// One direction: a keyed MAC and the number of the next frame.
class FrameMac {
 public:
  FrameMac(MacAlgorithm algorithm, const net::SessionKey& key);
  ~FrameMac();
  FrameMac(const FrameMac&) = delete;
  FrameMac& operator=(const FrameMac&) = delete;

  size_t tag_bytes() const { return algorithm_ == MacAlgorithm::HmacSha256 ? 32 : 16; }
  // Starts the next frame's tag with its number and header.
  void begin(const void* header, size_t n);
  void update(const void* p, size_t n);
  // The tag of the frame begun last; the next frame gets the next number.
  FrameTag finish();

 private:
  struct Ctx;
  MacAlgorithm algorithm_;
  std::unique_ptr<Ctx> ctx_;
  uint64_t frame_ = 0;
};

// Both directions of one pair: this rank to `peer` and `peer` to this rank.
class FrameSeal {
 public:
  FrameSeal(MacAlgorithm algorithm, const net::SessionKey& session, int rank, int peer);
  FrameMac& send() { return send_; }
  FrameMac& recv() { return recv_; }

 private:
  FrameMac send_;
  FrameMac recv_;
};

// The MAC that seals a connection's frames under `integrity` (its setup messages' under None).
MacAlgorithm mac_for(Integrity integrity);

// The key of the frames `from` sends to `to` over a connection with this session key.
net::SessionKey frame_key(const net::SessionKey& session, int from, int to);

// Constant time.
bool tags_equal(const FrameTag& a, const FrameTag& b);

}  // namespace cohort::comm
