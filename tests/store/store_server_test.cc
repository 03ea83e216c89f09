// StoreServer under abuse: every way a client can break the wire rules costs exactly one warning
// that names the client, closes that client only, and leaves the port serving real clients.
#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <functional>
#include <limits>
#include <optional>
#include <thread>

#include "cohort/base/bytes.h"
#include "cohort/base/checksum.h"
#include "cohort/base/error.h"
#include "cohort/store/store_protocol.h"
#include "cohort/store/tcp_store.h"
#include "store_test_env.h"
#include "store_test_wire.h"

namespace cohort::store {
namespace {

using net::MsgType;
using testing::frame_bytes;
using testing::kToken;
using testing::LogCapture;
using testing::RawClient;

Millis since(Clock::time_point t0) {
  return std::chrono::duration_cast<Millis>(Clock::now() - t0);
}

std::vector<uint8_t> request(const StoreRequest& q) {
  return frame_bytes(MsgType::kStoreRequest, encode_request(q));
}

std::vector<uint8_t> random_vector(size_t n) {
  std::vector<uint8_t> v(n);
  random_bytes(v.data(), n);
  return v;
}

class StoreServerTest : public ::testing::Test {
 protected:
  // The handshake deadline is far above the 1 s within which a violation must close a client, so
  // a client closed only at its handshake deadline fails these tests.
  explicit StoreServerTest(StoreServerOptions o = {.token = kToken,
                                                   .handshake_timeout = Millis(4000)})
      : server_(o) {}

  net::Endpoint ep() const { return server_.endpoint(); }

  // A real client is served, correctly and promptly.
  void expect_real_client_served(Millis within = Millis(1000)) {
    auto t0 = Clock::now();
    TcpStore s(ep(), kToken, Millis(5000));
    std::string key = "real/" + std::to_string(++real_runs_);
    s.set(key, to_bytes("ok"));
    EXPECT_EQ(to_string(s.get(key)), "ok");
    EXPECT_EQ(s.add(key + "/n", 2), 2);
    EXPECT_LT(since(t0), within) << "a real client waited too long";
  }

  LogCapture logs_;  // before server_: outlives the server thread
  StoreServer server_;
  int real_runs_ = 0;
};

TEST_F(StoreServerTest, WrongTokenIsAuthErrorNamingTheServerAndIsLoggedOnce) {
  try {
    TcpStore s(ep(), "not-the-token", Millis(2000));
    FAIL() << "authenticated with the wrong token";
  } catch (const AuthError& e) {
    EXPECT_NE(std::string(e.what()).find(ep().str()), std::string::npos) << e.what();
  }
  EXPECT_TRUE(logs_.wait_for_warnings("job token", 1, Millis(2000))) << logs_.dump();
  expect_real_client_served();
  EXPECT_EQ(logs_.warnings("closing client"), 1u) << logs_.dump();
}

TEST_F(StoreServerTest, ForgedHandshakeWithAPipelinedRequestIsNotServed) {
  RawClient raw(ep());
  ByteWriter hello;
  hello.put_bytes(random_vector(32).data(), 32).put_string("intruder");
  raw.send(frame_bytes(MsgType::kHello, hello.take()));
  net::read_frame_of(raw.sock(), MsgType::kChallenge, Deadline::after(Millis(2000)));
  // A response that proves nothing, immediately followed by a request, in one write.
  auto bytes = frame_bytes(MsgType::kResponse, std::vector<uint8_t>(32, 0));
  auto set = request({.op = StoreOp::kSet, .keys = {"stolen"}, .value = to_bytes("x")});
  bytes.insert(bytes.end(), set.begin(), set.end());
  raw.send(bytes);
  EXPECT_EQ(net::read_frame(raw.sock(), Deadline::after(Millis(2000))).type,
            static_cast<uint16_t>(MsgType::kReject));
  EXPECT_TRUE(raw.wait_closed(Millis(2000)).has_value());
  TcpStore s(ep(), kToken);
  EXPECT_FALSE(s.check({"stolen"}));
  EXPECT_EQ(logs_.warnings(raw.local()), 1u) << logs_.dump();
}

TEST_F(StoreServerTest, RequestBeforeTheHandshakeIsNotServed) {
  RawClient raw(ep());
  raw.send(request({.op = StoreOp::kSet, .keys = {"early"}, .value = to_bytes("x")}));
  EXPECT_TRUE(raw.wait_closed(Millis(1000)).has_value());
  TcpStore s(ep(), kToken);
  EXPECT_FALSE(s.check({"early"}));
  EXPECT_EQ(logs_.warnings(raw.local()), 1u) << logs_.dump();
}

// One way of breaking the rules: what the client sends, whether it authenticates first, whether
// it then half-closes, and a word the server's log line must contain.
struct Violation {
  std::string name;
  bool authenticate;
  std::function<std::vector<uint8_t>()> bytes;
  bool half_close;
  std::string reason;
};

void PrintTo(const Violation& v, std::ostream* os) {
  *os << v.name;
}

std::vector<Violation> violations() {
  using B = std::vector<uint8_t>;
  auto ok_hello = [] {
    ByteWriter w;
    w.put_bytes(B(32).data(), 32).put_string("c");
    return w.take();
  };
  return {
      {"RandomBytes", false, [] { return random_vector(4096); }, false, "magic"},
      {"HttpRequest", false,
       [] {
         std::string s = "GET /store HTTP/1.1\r\nHost: x\r\n\r\n";
         return B(s.begin(), s.end());
       },
       false, "magic"},
      {"WrongMagic", false, [=] { return frame_bytes(1, ok_hello(), 40, 0x464C457F); }, false,
       "magic"},
      {"WrongVersion", false, [=] { return frame_bytes(1, ok_hello(), 40, net::kFrameMagic, 9); },
       false, "version"},
      {"OversizedLengthInHandshake", false, [] { return frame_bytes(1, {}, uint64_t(1) << 60); },
       false, "exceeds the limit"},
      {"OversizedLengthAfterHandshake", true, [] { return frame_bytes(16, {}, uint64_t(1) << 60); },
       false, "exceeds the limit"},
      {"TruncatedHeader", false, [] { return B{'C', 'H', 'R', 'T', 1, 0}; }, true,
       "middle of a frame"},
      {"TruncatedHello", false, [] { return frame_bytes(1, B(10), 40); }, true,
       "middle of a frame"},
      {"TruncatedRequest", true,
       [] {
         return frame_bytes(16, B{1, 1, 0}, 100);
       },
       true, "middle of a frame"},
      {"ConnectAndLeave", false, [] { return B{}; }, true, "before the handshake completed"},
      {"MalformedHello", false, [] { return frame_bytes(MsgType::kHello, B(7)); }, false,
       "truncated"},
      {"UnknownRequestType", true,
       [] {
         return frame_bytes(MsgType::kStoreRequest, B{99, 0, 0, 0, 0});
       },
       false, "unknown store request type 99"},
      {"UnknownMessageType", true, [] { return frame_bytes(999, B{}, 0); }, false,
       "unexpected message type 999"},
      {"SetWithTwoKeys", true,
       [] {
         auto p = encode_request({.op = StoreOp::kCheck, .keys = {"a", "b"}});
         p[0] = static_cast<uint8_t>(StoreOp::kSet);
         p.insert(p.end(), {0, 0, 0, 0});  // an empty value
         return frame_bytes(MsgType::kStoreRequest, p);
       },
       false, "expected 1"},
      {"TrailingBytesInRequest", true,
       [] {
         auto p = encode_request({.op = StoreOp::kDelete, .keys = {"k"}});
         p.push_back(0);
         return frame_bytes(MsgType::kStoreRequest, p);
       },
       false, "trailing"},
      {"SecondRequestWhileParked", true,
       [] {
         auto a =
             request({.op = StoreOp::kWait, .keys = {"nobody-sets-this"}, .timeout_ms = 60000});
         auto b = request({.op = StoreOp::kCheck, .keys = {"x"}});
         a.insert(a.end(), b.begin(), b.end());
         return a;
       },
       false, "in flight"},
  };
}

class StoreServerViolation : public StoreServerTest,
                             public ::testing::WithParamInterface<Violation> {};

TEST_P(StoreServerViolation, ClosesTheClientWithOneWarningAndKeepsServing) {
  const Violation& v = GetParam();
  RawClient raw(ep());
  if (v.authenticate) raw.handshake(kToken);
  auto bytes = v.bytes();
  if (!bytes.empty()) raw.send(bytes);
  if (v.half_close) raw.shutdown_write();
  auto closed_after = raw.wait_closed(Millis(1000));
  ASSERT_TRUE(closed_after.has_value()) << "server kept the connection open";
  ASSERT_TRUE(logs_.wait_for_warnings(raw.local(), 1, Millis(1000))) << logs_.dump();
  EXPECT_EQ(logs_.warnings(raw.local()), 1u) << logs_.dump();
  EXPECT_EQ(logs_.warnings(v.reason), 1u) << "expected the reason '" << v.reason << "' in:\n"
                                          << logs_.dump();
  expect_real_client_served();
  EXPECT_EQ(logs_.warnings("closing client"), 1u) << logs_.dump();
}

INSTANTIATE_TEST_SUITE_P(Wire, StoreServerViolation, ::testing::ValuesIn(violations()),
                         [](const auto& info) { return info.param.name; });

class SlowLorisTest : public StoreServerTest {
 protected:
  SlowLorisTest() : StoreServerTest({.token = kToken, .handshake_timeout = Millis(1000)}) {}
};

TEST_F(SlowLorisTest, TricklingAndSilentClientsDoNotDelayOthersAndCloseAtTheDeadline) {
  auto t0 = Clock::now();
  RawClient silent(ep());
  RawClient trickle(ep());
  std::atomic<bool> stop{false};
  std::thread dripper([&] {
    // A valid hello, one byte every 100 ms: it would take seconds to finish.
    ByteWriter w;
    w.put_bytes(random_vector(32).data(), 32).put_string("slow");
    auto bytes = frame_bytes(MsgType::kHello, w.take());
    try {
      for (size_t i = 0; i < bytes.size() && !stop; ++i) {
        trickle.sock().send_all(&bytes[i], 1, Deadline::after(Millis(1000)));
        std::this_thread::sleep_for(Millis(100));
      }
    } catch (const Error&) {
      // the server closed us: expected
    }
  });
  // While both hold their connections, real clients come and go without delay.
  for (int i = 0; i < 3; ++i) {
    expect_real_client_served(Millis(300));
    std::this_thread::sleep_for(Millis(100));
  }
  auto silent_closed = silent.wait_closed(Millis(3000));
  auto trickle_closed = trickle.wait_closed(Millis(3000));
  stop = true;
  dripper.join();
  ASSERT_TRUE(silent_closed.has_value());
  ASSERT_TRUE(trickle_closed.has_value());
  EXPECT_GE(since(t0), Millis(950));
  EXPECT_LT(since(t0), Millis(2500));
  EXPECT_EQ(logs_.warnings(silent.local()), 1u) << logs_.dump();
  EXPECT_EQ(logs_.warnings(trickle.local()), 1u) << logs_.dump();
  EXPECT_EQ(logs_.warnings("handshake not completed within 1000 ms"), 2u) << logs_.dump();
}

TEST_F(StoreServerTest, BurstOfTwoHundredGarbageConnectionsThenARealClient) {
  std::vector<std::unique_ptr<RawClient>> raws;
  for (int i = 0; i < 200; ++i) raws.push_back(std::make_unique<RawClient>(ep()));
  for (int i = 0; i < 200; ++i) {
    if (i % 2) {
      raws[i]->send(random_vector(64 + i));
    } else {
      raws[i]->shutdown_write();  // connect and leave
    }
  }
  for (auto& r : raws) ASSERT_TRUE(r->wait_closed(Millis(3000)).has_value());
  ASSERT_TRUE(logs_.wait_for_warnings("closing client", 200, Millis(3000))) << logs_.dump();
  expect_real_client_served();
  EXPECT_EQ(logs_.warnings("closing client"), 200u);
  for (auto& r : raws) EXPECT_EQ(logs_.warnings(r->local()), 1u) << r->local();
}

TEST_F(StoreServerTest, ClientThatLeavesWhileParkedIsForgotten) {
  {
    RawClient raw(ep());
    raw.handshake(kToken);
    raw.send(request({.op = StoreOp::kWait, .keys = {"parked"}, .timeout_ms = 60000}));
    ASSERT_TRUE(logs_.wait_for_debug("waits for 'parked'", 1, Millis(5000))) << logs_.dump();
  }  // closed between requests: not a violation
  ASSERT_TRUE(logs_.wait_for_debug(" left", 1, Millis(5000))) << logs_.dump();
  TcpStore s(ep(), kToken);
  s.set("parked", to_bytes("now"));  // would touch the departed waiter if it were kept
  expect_real_client_served();
  EXPECT_EQ(logs_.warnings("closing client"), 0u) << logs_.dump();
}

// A wait may name a key many times; it ends once every key is there at once (not when each was
// there at some moment: one deleted in between keeps it parked). A wait on more keys than any
// request may name is refused.
TEST_F(StoreServerTest, AWaitOnRepeatedKeysEndsOnceEveryKeyIsThereAtOnce) {
  RawClient raw(ep());
  raw.handshake(kToken);
  std::vector<std::string> keys(50000, "a");
  keys.push_back("b");
  keys.push_back("c");
  raw.send(request({.op = StoreOp::kWait, .keys = keys, .timeout_ms = 60000}));
  ASSERT_TRUE(logs_.wait_for_debug("waits for 'a'", 1, Millis(5000))) << logs_.dump();
  TcpStore setter(ep(), kToken);
  // The server answers in order on one thread: once the setter has its answer, an answer to the
  // waiter would be in its socket already.
  auto answered = [&] {
    pollfd p{raw.sock().fd(), POLLIN, 0};
    return ::poll(&p, 1, 0) == 1;
  };
  setter.set("a", {});
  setter.set("b", {});
  EXPECT_TRUE(setter.delete_key("a"));
  setter.set("c", {});
  EXPECT_FALSE(answered()) << "released while 'a' was gone";
  setter.set("a", {});
  const auto f = net::read_frame(raw.sock(), Deadline::after(Millis(5000)));
  EXPECT_EQ(decode_response(StoreOp::kWait, f.payload).status, StoreStatus::kOk);

  RawClient greedy(ep());
  greedy.handshake(kToken);
  greedy.send(request(
      {.op = StoreOp::kWait, .keys = std::vector<std::string>(65537, "k"), .timeout_ms = 60000}));
  ASSERT_TRUE(greedy.wait_closed(Millis(5000)).has_value());
  EXPECT_TRUE(logs_.wait_for_warnings("65537 keys (at most 65536)", 1, Millis(2000)))
      << logs_.dump();
  expect_real_client_served();
}

// A counter stays a 64-bit integer: an add past its range is refused, and the counter is kept.
TEST_F(StoreServerTest, AnAddPastTheCountersRangeIsRefusedAndTheCounterKept) {
  TcpStore s(ep(), kToken);
  EXPECT_EQ(s.add("n", std::numeric_limits<int64_t>::max()), std::numeric_limits<int64_t>::max());
  try {
    s.add("n", 1);
    FAIL() << "an add past the range was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("past the range"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s.add("n", -1), std::numeric_limits<int64_t>::max() - 1);
}

TEST_F(StoreServerTest, ManyParkedWaitersAreAllReleased) {
  constexpr int kWaiters = 32;
  std::vector<std::unique_ptr<TcpStore>> clients;
  for (int i = 0; i < kWaiters; ++i) {
    clients.push_back(std::make_unique<TcpStore>(ep(), kToken, Millis(10000)));
  }
  std::atomic<int> done{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < kWaiters; ++i) {
    ts.emplace_back([&, i] {
      // Every waiter needs "go" and its own key; half of them get the value of their key.
      std::string mine = "w/" + std::to_string(i);
      if (i % 2) {
        clients[i]->wait({"go", mine});
      } else {
        EXPECT_EQ(to_string(clients[i]->get(mine)), mine);
        clients[i]->wait({"go"});
      }
      ++done;
    });
  }
  TcpStore setter(ep(), kToken);
  // Every waiter is parked (the even ones on their own key, the odd ones on "go" or theirs)
  // before any key is set.
  ASSERT_TRUE(logs_.wait_for_debug("waits for", kWaiters, Millis(10000))) << logs_.dump();
  for (int i = 0; i < kWaiters; ++i)
    setter.set("w/" + std::to_string(i), to_bytes("w/" + std::to_string(i)));
  // Each even waiter's get is answered and it parks again, on "go": all of them wait for it.
  ASSERT_TRUE(logs_.wait_for_debug("waits for 'go'", kWaiters, Millis(10000))) << logs_.dump();
  EXPECT_EQ(done.load(), 0);  // nobody is through without "go"
  setter.set("go", {});
  for (auto& t : ts) t.join();
  EXPECT_EQ(done.load(), kWaiters);
}

TEST_F(StoreServerTest, ServesTheRanksOfA1024RankJobAndItsLauncherAtOnce) {
  // Every rank of a 1,024-rank job connects at once, publishes its address, and waits for the
  // others' (as a communicator's rendezvous does); the launcher is the 1,025th client.
  constexpr int kRanks = 1024;
  std::vector<std::unique_ptr<TcpStore>> ranks(kRanks);
  std::vector<std::thread> ts;
  std::atomic<int> done{0};
  for (int r = 0; r < kRanks; ++r) {
    ts.emplace_back([&, r] {
      ranks[r] = std::make_unique<TcpStore>(ep(), kToken, Millis(60000));
      ranks[r]->set("addr/" + std::to_string(r), to_bytes(std::to_string(r)));
      ranks[r]->wait({"addr/" + std::to_string((r + 1) % kRanks), "go"});
      EXPECT_EQ(to_string(ranks[r]->get("addr/" + std::to_string((r + 1) % kRanks))),
                std::to_string((r + 1) % kRanks));
      ++done;
    });
  }
  TcpStore launcher(ep(), kToken, Millis(60000));
  std::vector<std::string> all;
  for (int r = 0; r < kRanks; ++r) all.push_back("addr/" + std::to_string(r));
  launcher.wait(all, Millis(60000));
  launcher.set("go", {});
  for (auto& t : ts) t.join();
  EXPECT_EQ(done.load(), kRanks);
  EXPECT_EQ(logs_.warnings("refusing"), 0u) << logs_.dump();
}

TEST_F(StoreServerTest, ValueOverTheLimitIsAnErrorAndTheConnectionStaysUsable) {
  StoreServer small({.token = kToken, .max_value_bytes = 1024});
  TcpStore s(small.endpoint(), kToken);
  try {
    s.set("too-big", Bytes(2048));
    FAIL() << "accepted a value over max_value_bytes";
  } catch (const TimeoutError&) {
    FAIL() << "wrong error type";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("too-big"), std::string::npos) << e.what();
  }
  s.set("fits", Bytes(1024, 1));
  EXPECT_EQ(s.get("fits"), Bytes(1024, 1));
  EXPECT_EQ(logs_.warnings("closing client"), 0u) << logs_.dump();
}

TEST_F(StoreServerTest, MaxConnectionsIsEnforced) {
  StoreServer small({.token = kToken, .handshake_timeout = Millis(5000), .max_connections = 3});
  std::vector<std::unique_ptr<RawClient>> holders;
  for (int i = 0; i < 3; ++i) {
    holders.push_back(std::make_unique<RawClient>(small.endpoint()));
    holders.back()->handshake(kToken);  // answered: the server has accepted and counts it
  }
  RawClient extra(small.endpoint());
  EXPECT_TRUE(extra.wait_closed(Millis(1000)).has_value());
  EXPECT_TRUE(logs_.wait_for_warnings("max_connections", 1, Millis(1000))) << logs_.dump();
  // A client refused while the server is full dials again until its own deadline, and gets in
  // once the holders leave.
  std::optional<std::string> joined;
  std::thread late([&] {
    try {
      TcpStore s(small.endpoint(), kToken, Millis(10000));
      s.set("in", {});
      joined = "";
    } catch (const Error& e) {
      joined = e.what();
    }
  });
  EXPECT_TRUE(logs_.wait_for_warnings("max_connections", 2, Millis(3000))) << logs_.dump();
  holders.clear();
  late.join();
  ASSERT_TRUE(joined.has_value());
  EXPECT_EQ(*joined, "") << "a client refused while the server was full did not get in";
}

// Clients that connect and never authenticate are counted apart from the job's own: past
// max_handshakes the oldest of them makes room, and a real client gets in at once however many
// there are, long before their handshake deadline.
TEST_F(StoreServerTest, ConnectionsThatNeverAuthenticateDoNotKeepTheJobsOwnOut) {
  StoreServer small({.token = kToken,
                     .handshake_timeout = Millis(60000),
                     .max_connections = 4,
                     .max_handshakes = 3});
  std::vector<std::unique_ptr<RawClient>> idle;
  for (int i = 0; i < 12; ++i) idle.push_back(std::make_unique<RawClient>(small.endpoint()));
  // The server closes the oldest idle ones as the others come: 9 of the 12.
  for (int i = 0; i < 9; ++i) {
    EXPECT_TRUE(idle[i]->wait_closed(Millis(5000)).has_value()) << "idle client " << i;
  }
  const auto t0 = Clock::now();
  TcpStore real(small.endpoint(), kToken, Millis(5000));
  real.set("in", store::to_bytes("1"));
  EXPECT_LT(since(t0), Millis(2000));
  EXPECT_EQ(logs_.warnings("max_connections"), 0u) << logs_.dump();
  EXPECT_GE(logs_.warnings("(max_handshakes)"), 9u) << logs_.dump();
  // Authenticated clients are still bounded by max_connections.
  std::vector<std::unique_ptr<RawClient>> holders;
  for (int i = 0; i < 3; ++i) {
    holders.push_back(std::make_unique<RawClient>(small.endpoint()));
    holders.back()->handshake(kToken);
  }
  RawClient extra(small.endpoint());
  EXPECT_TRUE(extra.wait_closed(Millis(1000)).has_value());
  EXPECT_TRUE(logs_.wait_for_warnings("max_connections", 1, Millis(1000))) << logs_.dump();
}

TEST_F(StoreServerTest, StopIsPromptAndParkedClientsSeePeerLostNamingTheServer) {
  auto srv = std::make_unique<StoreServer>(StoreServerOptions{.token = kToken});
  const std::string where = srv->endpoint().str();
  TcpStore getter(srv->endpoint(), kToken, Millis(20000));
  TcpStore idle(srv->endpoint(), kToken, Millis(300));
  std::optional<std::string> error;
  std::thread t([&] {
    try {
      getter.get("never");
    } catch (const PeerLostError& e) {
      error = e.what();
    }
  });
  ASSERT_TRUE(logs_.wait_for_debug("waits for 'never'", 1, Millis(5000))) << logs_.dump();
  auto t0 = Clock::now();
  srv->stop();
  EXPECT_LT(since(t0), Millis(500));
  t.join();
  EXPECT_LT(since(t0), Millis(1000)) << "the parked getter was not released";
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->find(where), std::string::npos) << *error;
  EXPECT_NE(error->find("'never'"), std::string::npos) << *error;
  // A client whose server is gone: lost connection, then no server to reconnect to.
  EXPECT_THROW(idle.set("x", {}), PeerLostError);
  EXPECT_THROW(idle.set("x", {}), TimeoutError);
  srv.reset();
}

// A short wait on a client whose server is gone spends no longer reconnecting than the wait may
// take: a worker polling for its next membership notices that it was cut off within one poll,
// not after the store's whole timeout.
TEST_F(StoreServerTest, AShortWaitOnAServerThatIsGoneEndsAtItsOwnDeadline) {
  auto srv = std::make_unique<StoreServer>(StoreServerOptions{.token = kToken});
  TcpStore s(srv->endpoint(), kToken, Millis(20000));
  srv.reset();
  EXPECT_THROW(s.set("x", {}), PeerLostError);
  auto t0 = Clock::now();
  EXPECT_THROW(s.wait({"k"}, Millis(200)), TimeoutError);
  EXPECT_LT(since(t0), Millis(2000));
}

// With a reconnect timeout, any call on a client whose server is gone gives up within it, however
// long the store's own timeout.
TEST_F(StoreServerTest, AGoneServerIsGivenUpOnWithinTheReconnectTimeout) {
  auto srv = std::make_unique<StoreServer>(StoreServerOptions{.token = kToken});
  TcpStore s(srv->endpoint(), kToken, Millis(20000));
  s.set_reconnect_timeout(Millis(300));
  srv.reset();
  EXPECT_THROW(s.set("x", {}), PeerLostError);
  for (int i = 0; i < 2; ++i) {
    auto t0 = Clock::now();
    EXPECT_THROW(s.set("x", {}), TimeoutError);
    EXPECT_LT(since(t0), Millis(2000));
  }
}

TEST(TcpStoreConnect, WaitsForAServerThatStartsLater) {
  uint16_t port;
  {
    auto probe = net::Listener::bind("127.0.0.1", 0);
    port = probe.port();
  }
  std::unique_ptr<StoreServer> srv;
  std::thread starter([&] {
    std::this_thread::sleep_for(Millis(300));
    srv = std::make_unique<StoreServer>(StoreServerOptions{.port = port, .token = kToken});
  });
  auto t0 = Clock::now();
  TcpStore s({"127.0.0.1", port}, kToken, Millis(5000));
  EXPECT_GE(since(t0), Millis(250));
  starter.join();
  s.set("k", to_bytes("v"));
  EXPECT_EQ(to_string(s.get("k")), "v");
}

TEST(TcpStoreConnect, TimeoutErrorNamesTheServerWhenNobodyListens) {
  uint16_t port;
  {
    auto probe = net::Listener::bind("127.0.0.1", 0);
    port = probe.port();
  }
  auto t0 = Clock::now();
  try {
    TcpStore s({"127.0.0.1", port}, kToken, Millis(200));
    FAIL() << "connected to nothing";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(port)), std::string::npos)
        << e.what();
  }
  EXPECT_LT(since(t0), Millis(2000));
}

TEST(TcpStoreIpv6, ServesOverTheIpv6Loopback) {
  std::unique_ptr<StoreServer> srv;
  try {
    srv = std::make_unique<StoreServer>(StoreServerOptions{.bind_host = "::1", .token = kToken});
  } catch (const SystemError& e) {
    GTEST_SKIP() << "no IPv6 loopback here: " << e.what();
  }
  EXPECT_EQ(srv->endpoint().str(), "[::1]:" + std::to_string(srv->port()));
  TcpStore s(net::Endpoint::parse(srv->endpoint().str()), kToken, Millis(5000));
  s.set("v6", to_bytes("yes"));
  EXPECT_EQ(to_string(s.get("v6")), "yes");
}

}  // namespace
}  // namespace cohort::store
