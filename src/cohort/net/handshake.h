// Mutual challenge-response authentication with the job's secret token (HMAC-SHA256).
// The token never crosses the wire:
//   client -> Hello     {client_nonce[32], client_info}
//   server -> Challenge {server_nonce[32], server_info, HMAC(token, "cohort-server" | cn | sn |
//   info)} client -> Response  {HMAC(token, "cohort-client" | sn | cn | client_info)} server ->
//   Accept
// Each side proves the token over the other's fresh nonce, so replayed transcripts fail.
// The infos (e.g. "rank 3") are covered by the MACs and returned to the caller.
// Both sides also derive a session key, HMAC(token, "cohort-session" | cn | sn | client_info |
// server_info): fresh for every connection (both nonces are), known only to holders of the token,
// and never sent. Whatever the connection carries after the handshake can be authenticated with it
// (comm/frame_seal.h).
// A side that finds the other's proof wrong sends Reject (best effort) before it gives up, so both
// ends of a token mismatch raise AuthError.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cohort/base/clock.h"
#include "cohort/net/frame.h"
#include "cohort/net/socket.h"

namespace cohort::net {

using SessionKey = std::array<uint8_t, 32>;

// Both throw AuthError if the peer does not prove the token, ProtocolError on malformed
// messages, TimeoutError when the peer is too slow. Return the peer's info string, and the
// connection's session key in *session when asked.
std::string handshake_as_client(Socket& s, std::string_view token, std::string_view my_info,
                                Deadline deadline, SessionKey* session = nullptr);
std::string handshake_as_server(Socket& s, std::string_view token, std::string_view my_info,
                                Deadline deadline, SessionKey* session = nullptr);

// Upper bound on an info string, and on every handshake frame.
inline constexpr size_t kMaxHandshakeInfo = 1024;
inline constexpr size_t kMaxHandshakeFrame = kMaxHandshakeInfo + 128;

// The server side as a pure state machine over frames, for event loops that must never block on
// one client: feed it the frames the client sent, send what it returns.
class ServerHandshake {
 public:
  ServerHandshake(std::string_view token, std::string_view my_info);

  // Consumes the client's Hello; returns the Challenge payload to send. Throws ProtocolError.
  std::vector<uint8_t> on_hello(const Frame& hello);
  // Consumes the client's Response. Throws AuthError when the client does not prove the token (the
  // caller should then send Reject) or when the client rejected us, ProtocolError when malformed.
  // On return the client is authenticated: send Accept.
  void on_response(const Frame& response);

  const std::string& client_info() const { return client_info_; }
  // The connection's session key, once on_response() has returned.
  SessionKey session() const;

 private:
  enum class Step { kHello, kResponse, kDone };
  std::string token_;
  std::string my_info_;
  Step step_ = Step::kHello;
  std::array<uint8_t, 32> client_nonce_{};
  std::array<uint8_t, 32> server_nonce_{};
  std::string client_info_;
};

}  // namespace cohort::net
