#include "cohort/net/handshake.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <future>
#include <string>

#include "cohort/base/bytes.h"
#include "cohort/base/checksum.h"
#include "cohort/base/error.h"
#include "cohort/net/frame.h"
#include "net_test_util.h"

namespace cohort::net {
namespace {

using testing::since;
using testing::tcp_pair;

Deadline soon() {
  return Deadline::after(Millis(5000));
}

// Runs fn(server_socket) on another thread; returns its result or exception through a future.
template <typename Fn>
auto on_thread(Socket& s, Fn fn) {
  return std::async(std::launch::async, [&s, fn] { return fn(s); });
}

TEST(Handshake, SucceedsWithTheSameTokenAndExchangesInfos) {
  auto [c, s] = tcp_pair();
  auto server =
      on_thread(s, [](Socket& s) { return handshake_as_server(s, "t0k", "srv", soon()); });
  EXPECT_EQ(handshake_as_client(c, "t0k", "rank 3", soon()), "srv");
  EXPECT_EQ(server.get(), "rank 3");
  // The connection is usable afterwards.
  write_frame(c, MsgType::kStoreRequest, std::vector<uint8_t>{9}, soon());
  EXPECT_EQ(read_frame(s, soon()).payload, std::vector<uint8_t>{9});
}

// Both ends derive one session key, which is new for every connection and depends on the token.
TEST(Handshake, BothEndsDeriveTheSameSessionKeyAndEachConnectionAFreshOne) {
  auto connect = [](const std::string& token) {
    auto [c, s] = tcp_pair();
    SessionKey client{}, server{};
    auto srv = on_thread(s, [&server, token](Socket& s) {
      return handshake_as_server(s, token, "srv", soon(), &server);
    });
    handshake_as_client(c, token, "cli", soon(), &client);
    srv.get();
    EXPECT_EQ(client, server);
    return client;
  };
  const SessionKey first = connect("t0k"), second = connect("t0k"), other = connect("t1k");
  EXPECT_NE(first, SessionKey{});
  EXPECT_NE(first, second);
  EXPECT_NE(first, other);
}

TEST(Handshake, WrongTokenIsAuthErrorOnBothSides) {
  auto [c, s] = tcp_pair();
  auto server = on_thread(s, [](Socket& s) { return handshake_as_server(s, "right", "", soon()); });
  auto t0 = Clock::now();
  EXPECT_THROW(handshake_as_client(c, "wrong", "", soon()), AuthError);
  EXPECT_THROW(server.get(), AuthError);
  EXPECT_LT(since(t0), Millis(2000));  // the Reject ends it: nobody waits for a deadline
}

// A client that lies: it skips the MAC check on the challenge and answers with a forged MAC.
TEST(Handshake, ServerRejectsAForgedResponse) {
  auto [c, s] = tcp_pair();
  auto server = on_thread(s, [](Socket& s) { return handshake_as_server(s, "right", "", soon()); });
  ByteWriter hello;
  uint8_t cn[32] = {};
  hello.put_bytes(cn, 32).put_string("intruder");
  write_frame(c, MsgType::kHello, hello.bytes(), soon());
  read_frame_of(c, MsgType::kChallenge, soon());
  Digest forged{};
  write_frame(c, MsgType::kResponse, forged.data(), forged.size(), soon());
  EXPECT_EQ(read_frame(c, soon()).type, static_cast<uint16_t>(MsgType::kReject));
  EXPECT_THROW(server.get(), AuthError);
}

// A man in the middle flips one bit of the challenge (nonce, info or MAC): the client notices.
class TamperedChallenge : public ::testing::TestWithParam<size_t> {};

TEST_P(TamperedChallenge, ClientRaisesAuthError) {
  auto [c, s] = tcp_pair();
  const size_t flip = GetParam();
  auto mitm = on_thread(s, [flip](Socket& s) {
    // Play an honest server with the right token, but corrupt one byte of the challenge.
    Frame hello = read_frame_of(s, MsgType::kHello, soon());
    ServerHandshake hs("tok", "srv");
    std::vector<uint8_t> ch = hs.on_hello(hello);
    ch.at(flip % ch.size()) ^= 0x01;
    write_frame(s, MsgType::kChallenge, ch, soon());
    return read_frame(s, soon()).type;
  });
  EXPECT_THROW(handshake_as_client(c, "tok", "cli", soon()), AuthError);
  EXPECT_EQ(mitm.get(), static_cast<uint16_t>(MsgType::kReject));
}

// Challenge layout: nonce[32] | info length u32 | "srv" | MAC[32].
INSTANTIATE_TEST_SUITE_P(Handshake, TamperedChallenge, ::testing::Values(0, 31, 39, 40, 70));

TEST(Handshake, ReplayedResponseFailsAgainstAFreshNonce) {
  // Record a genuine response from one session, replay it in the next one.
  Digest recorded{};
  uint8_t cn[32];
  random_bytes(cn, 32);
  ByteWriter hello;
  hello.put_bytes(cn, 32).put_string("cli");
  for (int session = 0; session < 2; ++session) {
    auto [c, s] = tcp_pair();
    auto server = on_thread(s, [](Socket& s) { return handshake_as_server(s, "tok", "", soon()); });
    write_frame(c, MsgType::kHello, hello.bytes(), soon());
    Frame ch = read_frame_of(c, MsgType::kChallenge, soon());
    if (session == 0) {
      ByteWriter m;
      m.put_bytes("cohort-client", 13).put_bytes(ch.payload.data(), 32).put_bytes(cn, 32);
      m.put_string("cli");
      recorded = hmac_sha256("tok", m.bytes().data(), m.bytes().size());
    }
    write_frame(c, MsgType::kResponse, recorded.data(), recorded.size(), soon());
    if (session == 0) {
      EXPECT_EQ(server.get(), "cli");
    } else {
      EXPECT_THROW(server.get(), AuthError);
    }
  }
}

TEST(Handshake, ServerTimesOutOnASilentClient) {
  auto [c, s] = tcp_pair();
  auto t0 = Clock::now();
  EXPECT_THROW(handshake_as_server(s, "tok", "", Deadline::after(Millis(150))), TimeoutError);
  EXPECT_GE(since(t0), Millis(140));
}

TEST(Handshake, ServerRejectsGarbageAsProtocolError) {
  auto [c, s] = tcp_pair();
  const char garbage[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  c.send_all(garbage, sizeof(garbage), soon());
  EXPECT_THROW(handshake_as_server(s, "tok", "", soon()), ProtocolError);
}

TEST(Handshake, OversizedInfoIsRefused) {
  auto [c, s] = tcp_pair();
  EXPECT_THROW(handshake_as_client(c, "tok", std::string(kMaxHandshakeInfo + 1, 'x'), soon()),
               ProtocolError);
  EXPECT_THROW(ServerHandshake("tok", std::string(kMaxHandshakeInfo + 1, 'x')), ProtocolError);
}

TEST(ServerHandshake, RejectsMessagesOutOfOrder) {
  ServerHandshake hs("tok", "srv");
  Frame resp{static_cast<uint16_t>(MsgType::kResponse), std::vector<uint8_t>(32)};
  EXPECT_THROW(hs.on_response(resp), ProtocolError);  // no hello yet
  Frame wrong{static_cast<uint16_t>(MsgType::kStoreRequest), {}};
  EXPECT_THROW(hs.on_hello(wrong), ProtocolError);
  ServerHandshake hs2("tok", "srv");
  ByteWriter hello;
  hello.put_bytes(std::vector<uint8_t>(32).data(), 32).put_string("c");
  hs2.on_hello(Frame{static_cast<uint16_t>(MsgType::kHello), hello.take()});
  ByteWriter again;
  again.put_bytes(std::vector<uint8_t>(32).data(), 32).put_string("c");
  EXPECT_THROW(hs2.on_hello(Frame{static_cast<uint16_t>(MsgType::kHello), again.take()}),
               ProtocolError);
}

TEST(ServerHandshake, RejectsTruncatedAndTrailingHellos) {
  ServerHandshake a("tok", "srv");
  EXPECT_THROW(a.on_hello(Frame{1, std::vector<uint8_t>(20)}), ProtocolError);
  ServerHandshake b("tok", "srv");
  ByteWriter w;
  w.put_bytes(std::vector<uint8_t>(32).data(), 32).put_string("c").put<uint8_t>(0);
  EXPECT_THROW(b.on_hello(Frame{1, w.take()}), ProtocolError);
  ServerHandshake c("tok", "srv");
  ByteWriter lying;  // claims a 4 GiB info string
  lying.put_bytes(std::vector<uint8_t>(32).data(), 32).put<uint32_t>(0xFFFFFFFFu);
  EXPECT_THROW(c.on_hello(Frame{1, lying.take()}), ProtocolError);
}

}  // namespace
}  // namespace cohort::net
