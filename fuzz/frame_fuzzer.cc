// The frame decoder (net/frame_stream.h, net/frame.h) on whatever a peer sends: a stream of
// bytes read as frames until the peer closes. It may refuse (ProtocolError) or see the close
// (PeerLostError); it may not crash, read out of bounds, or allocate past the frame limit.
#include <cstdint>

#include "cohort/base/error.h"
#include "cohort/net/frame_stream.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cohort;
  // The limit a store server and the mesh handshake use for one frame.
  constexpr size_t kLimit = 4096;
  {
    net::Socket s = fuzz::delivered(data, size);
    s.set_nonblocking();
    net::FrameReader reader;
    try {
      for (int frames = 0; frames < 1000; ++frames) {
        if (!reader.read(s, kLimit)) break;
        net::Frame f = reader.take();
        if (f.payload.size() > kLimit) __builtin_trap();
      }
    } catch (const ProtocolError&) {
    } catch (const PeerLostError&) {
    }
  }
  {
    // The blocking reader that clients use.
    net::Socket s = fuzz::delivered(data, size);
    try {
      for (int frames = 0; frames < 1000; ++frames) {
        net::Frame f = net::read_frame(s, Deadline::after(std::chrono::seconds(5)), kLimit);
        if (f.payload.size() > kLimit) __builtin_trap();
      }
    } catch (const ProtocolError&) {
    } catch (const PeerLostError&) {
    }
  }
  return 0;
}
