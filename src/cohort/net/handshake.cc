#include "cohort/net/handshake.h"

#include <cstring>

#include "cohort/base/bytes.h"
#include "cohort/base/checksum.h"
#include "cohort/base/error.h"
#include "cohort/net/frame.h"

namespace cohort::net {
namespace {

constexpr size_t kNonce = 32;
constexpr size_t kMaxFrame = kMaxHandshakeInfo + 128;

Digest mac(std::string_view token, std::string_view label, const uint8_t* a, const uint8_t* b,
           std::string_view info) {
  ByteWriter w;
  w.put_bytes(label.data(), label.size()).put_bytes(a, kNonce).put_bytes(b, kNonce);
  w.put_string(info);
  return hmac_sha256(token, w.bytes().data(), w.bytes().size());
}

void check_info(std::string_view info) {
  if (info.size() > kMaxHandshakeInfo) throw ProtocolError("handshake info too long");
}

}  // namespace

std::string handshake_as_client(Socket& s, std::string_view token, std::string_view my_info,
                                Deadline deadline) {
  check_info(my_info);
  uint8_t cn[kNonce];
  random_bytes(cn, kNonce);
  ByteWriter hello;
  hello.put_bytes(cn, kNonce).put_string(my_info);
  write_frame(s, MsgType::kHello, hello.bytes(), deadline);

  Frame f = read_frame(s, deadline, kMaxFrame);
  if (f.type == static_cast<uint16_t>(MsgType::kReject)) {
    throw AuthError("server rejected the handshake");
  }
  if (f.type != static_cast<uint16_t>(MsgType::kChallenge)) {
    throw ProtocolError("expected a handshake challenge, got message type " +
                        std::to_string(f.type));
  }
  ByteReader r(f.payload);
  const uint8_t* sn = r.get_bytes(kNonce);
  std::string server_info = r.get_string();
  Digest server_mac;
  std::memcpy(server_mac.data(), r.get_bytes(server_mac.size()), server_mac.size());
  if (!digest_equal(server_mac, mac(token, "cohort-server", cn, sn, server_info))) {
    throw AuthError("server failed to prove the job token");
  }
  Digest mine = mac(token, "cohort-client", sn, cn, my_info);
  write_frame(s, MsgType::kResponse, mine.data(), mine.size(), deadline);

  Frame ok = read_frame(s, deadline, kMaxFrame);
  if (ok.type != static_cast<uint16_t>(MsgType::kAccept)) {
    throw AuthError("server rejected the job token");
  }
  return server_info;
}

std::string handshake_as_server(Socket& s, std::string_view token, std::string_view my_info,
                                Deadline deadline) {
  check_info(my_info);
  Frame hello = read_frame_of(s, MsgType::kHello, deadline, kMaxFrame);
  ByteReader r(hello.payload);
  uint8_t cn[kNonce];
  std::memcpy(cn, r.get_bytes(kNonce), kNonce);
  std::string client_info = r.get_string();
  if (!r.done()) throw ProtocolError("trailing bytes in handshake hello");

  uint8_t sn[kNonce];
  random_bytes(sn, kNonce);
  Digest server_mac = mac(token, "cohort-server", cn, sn, my_info);
  ByteWriter ch;
  ch.put_bytes(sn, kNonce).put_string(my_info).put_bytes(server_mac.data(), server_mac.size());
  write_frame(s, MsgType::kChallenge, ch.bytes(), deadline);

  Frame resp = read_frame(s, deadline, kMaxFrame);
  if (resp.type == static_cast<uint16_t>(MsgType::kReject)) {
    throw AuthError("client rejected the server (it could not prove the job token)");
  }
  if (resp.type != static_cast<uint16_t>(MsgType::kResponse) ||
      resp.payload.size() != sizeof(Digest)) {
    throw ProtocolError("malformed handshake response");
  }
  Digest client_mac;
  std::memcpy(client_mac.data(), resp.payload.data(), client_mac.size());
  if (!digest_equal(client_mac, mac(token, "cohort-client", sn, cn, client_info))) {
    write_frame(s, MsgType::kReject, nullptr, 0, deadline);
    throw AuthError("client failed to prove the job token");
  }
  write_frame(s, MsgType::kAccept, nullptr, 0, deadline);
  return client_info;
}

}  // namespace cohort::net
