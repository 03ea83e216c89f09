#include "cohort/net/handshake.h"

#include <cstring>

#include "cohort/base/bytes.h"
#include "cohort/base/checksum.h"
#include "cohort/base/error.h"

namespace cohort::net {
namespace {

constexpr size_t kNonce = 32;

Digest mac(std::string_view token, std::string_view label, const uint8_t* a, const uint8_t* b,
           std::string_view info) {
  ByteWriter w;
  w.put_bytes(label.data(), label.size()).put_bytes(a, kNonce).put_bytes(b, kNonce);
  w.put_string(info);
  return hmac_sha256(token, w.bytes().data(), w.bytes().size());
}

SessionKey session_key(std::string_view token, const uint8_t* cn, const uint8_t* sn,
                       std::string_view client_info, std::string_view server_info) {
  ByteWriter w;
  const std::string_view label = "cohort-session";
  w.put_bytes(label.data(), label.size()).put_bytes(cn, kNonce).put_bytes(sn, kNonce);
  w.put_string(client_info).put_string(server_info);
  return hmac_sha256(token, w.bytes().data(), w.bytes().size());
}

void check_info(std::string_view info) {
  if (info.size() > kMaxHandshakeInfo) throw ProtocolError("handshake info too long");
}

// Tells the peer we are giving up, without letting a second failure hide the first.
void send_reject(Socket& s, Deadline deadline) {
  try {
    write_frame(s, MsgType::kReject, nullptr, 0, deadline.earlier(Deadline::after(Millis(100))));
  } catch (const Error&) {
  }
}

}  // namespace

std::string handshake_as_client(Socket& s, std::string_view token, std::string_view my_info,
                                Deadline deadline, SessionKey* session) {
  check_info(my_info);
  uint8_t cn[kNonce];
  random_bytes(cn, kNonce);
  ByteWriter hello;
  hello.put_bytes(cn, kNonce).put_string(my_info);
  write_frame(s, MsgType::kHello, hello.bytes(), deadline);

  Frame f = read_frame(s, deadline, kMaxHandshakeFrame);
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
  if (!r.done()) throw ProtocolError("trailing bytes in handshake challenge");
  if (!digest_equal(server_mac, mac(token, "cohort-server", cn, sn, server_info))) {
    send_reject(s, deadline);
    throw AuthError("server failed to prove the job token");
  }
  Digest mine = mac(token, "cohort-client", sn, cn, my_info);
  write_frame(s, MsgType::kResponse, mine.data(), mine.size(), deadline);

  Frame ok = read_frame(s, deadline, kMaxHandshakeFrame);
  if (ok.type != static_cast<uint16_t>(MsgType::kAccept)) {
    throw AuthError("server rejected the job token");
  }
  if (session) *session = session_key(token, cn, sn, my_info, server_info);
  return server_info;
}

ServerHandshake::ServerHandshake(std::string_view token, std::string_view my_info)
    : token_(token), my_info_(my_info) {
  check_info(my_info_);
}

std::vector<uint8_t> ServerHandshake::on_hello(const Frame& hello) {
  if (step_ != Step::kHello) throw ProtocolError("unexpected handshake hello");
  if (hello.type != static_cast<uint16_t>(MsgType::kHello)) {
    throw ProtocolError("expected a handshake hello, got message type " +
                        std::to_string(hello.type));
  }
  try {
    ByteReader r(hello.payload);
    std::memcpy(client_nonce_.data(), r.get_bytes(kNonce), kNonce);
    client_info_ = r.get_string();
    if (!r.done()) throw ProtocolError("trailing bytes");
    check_info(client_info_);
  } catch (const ProtocolError& e) {
    throw ProtocolError(std::string("malformed handshake hello: ") + e.what());
  }

  random_bytes(server_nonce_.data(), kNonce);
  Digest server_mac =
      mac(token_, "cohort-server", client_nonce_.data(), server_nonce_.data(), my_info_);
  ByteWriter ch;
  ch.put_bytes(server_nonce_.data(), kNonce).put_string(my_info_);
  ch.put_bytes(server_mac.data(), server_mac.size());
  step_ = Step::kResponse;
  return ch.take();
}

void ServerHandshake::on_response(const Frame& resp) {
  if (step_ != Step::kResponse) throw ProtocolError("unexpected handshake response");
  if (resp.type == static_cast<uint16_t>(MsgType::kReject)) {
    throw AuthError("client rejected the server (it could not prove the job token)");
  }
  if (resp.type != static_cast<uint16_t>(MsgType::kResponse) ||
      resp.payload.size() != sizeof(Digest)) {
    throw ProtocolError("malformed handshake response (type " + std::to_string(resp.type) + ", " +
                        std::to_string(resp.payload.size()) + " bytes)");
  }
  Digest client_mac;
  std::memcpy(client_mac.data(), resp.payload.data(), client_mac.size());
  if (!digest_equal(client_mac, mac(token_, "cohort-client", server_nonce_.data(),
                                    client_nonce_.data(), client_info_))) {
    throw AuthError("client failed to prove the job token");
  }
  step_ = Step::kDone;
}

SessionKey ServerHandshake::session() const {
  if (step_ != Step::kDone) throw Error("internal error: no session key before the handshake ends");
  return session_key(token_, client_nonce_.data(), server_nonce_.data(), client_info_, my_info_);
}

std::string handshake_as_server(Socket& s, std::string_view token, std::string_view my_info,
                                Deadline deadline, SessionKey* session) {
  ServerHandshake hs(token, my_info);
  write_frame(s, MsgType::kChallenge, hs.on_hello(read_frame(s, deadline, kMaxHandshakeFrame)),
              deadline);
  try {
    hs.on_response(read_frame(s, deadline, kMaxHandshakeFrame));
  } catch (const AuthError&) {
    send_reject(s, deadline);
    throw;
  }
  write_frame(s, MsgType::kAccept, nullptr, 0, deadline);
  if (session) *session = hs.session();
  return hs.client_info();
}

}  // namespace cohort::net
