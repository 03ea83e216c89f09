// The authenticated handshake (net/handshake.h) against a peer that sends anything: the
// non-blocking server state machine fed the frames of the input, and the blocking client whose
// server is the input. Either may refuse (AuthError, ProtocolError) or see the peer go
// (PeerLostError, TimeoutError); neither may crash, and neither may accept: without the token no
// input can prove it.
#include <cstdint>

#include "cohort/base/error.h"
#include "cohort/net/frame_stream.h"
#include "cohort/net/handshake.h"
#include "fuzz_util.h"

namespace {
constexpr std::string_view kToken = "fuzz-token-0123456789abcdef";
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cohort;
  {
    net::Socket s = fuzz::delivered(data, size);
    s.set_nonblocking();
    net::FrameReader reader;
    net::ServerHandshake server(kToken, "rank 0");
    try {
      if (reader.read(s, net::kMaxHandshakeFrame)) {
        (void)server.on_hello(reader.take());
        if (reader.read(s, net::kMaxHandshakeFrame)) {
          server.on_response(reader.take());
          __builtin_trap();  // authenticated without the token
        }
      }
    } catch (const ProtocolError&) {  // AuthError is one
    } catch (const PeerLostError&) {
    }
  }
  {
    auto c = fuzz::conversation(data, size);
    try {
      (void)net::handshake_as_client(c.ours, kToken, "rank 1",
                                     Deadline::after(std::chrono::seconds(5)));
      __builtin_trap();  // the input proved a token it does not know
    } catch (const ProtocolError&) {
    } catch (const PeerLostError&) {
    } catch (const TimeoutError&) {
    }
  }
  return 0;
}
