// Mutual challenge-response authentication with the job's secret token (HMAC-SHA256).
// The token never crosses the wire:
//   client -> Hello     {client_nonce[32], client_info}
//   server -> Challenge {server_nonce[32], server_info, HMAC(token, "cohort-server" | cn | sn | info)}
//   client -> Response  {HMAC(token, "cohort-client" | sn | cn | client_info)}
//   server -> Accept
// Each side proves the token over the other's fresh nonce, so replayed transcripts fail.
// The infos (e.g. "rank 3") are covered by the MACs and returned to the caller.
#pragma once

#include <string>
#include <string_view>

#include "cohort/base/clock.h"
#include "cohort/net/socket.h"

namespace cohort::net {

// Both throw AuthError if the peer does not prove the token, ProtocolError on malformed
// messages, TimeoutError when the peer is too slow. Return the peer's info string.
std::string handshake_as_client(Socket& s, std::string_view token, std::string_view my_info,
                                Deadline deadline);
std::string handshake_as_server(Socket& s, std::string_view token, std::string_view my_info,
                                Deadline deadline);

// Upper bound on an info string and on every handshake frame.
inline constexpr size_t kMaxHandshakeInfo = 1024;

}  // namespace cohort::net
