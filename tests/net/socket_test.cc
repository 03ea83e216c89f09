#include "cohort/net/socket.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <thread>
#include <vector>

#include "cohort/base/error.h"
#include "net_test_util.h"

namespace cohort::net {
namespace {

using testing::since;
using testing::tcp_pair;

TEST(Socket, SendAllRecvAllMoveEveryByte) {
  auto sockets = tcp_pair();  // named, not bound: lambdas below capture them
  Socket& a = sockets.first;
  Socket& b = sockets.second;
  std::vector<uint8_t> out(4 << 20), in(out.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(i * 7 + (i >> 13));
  std::thread sender([&] { a.send_all(out.data(), out.size(), Deadline::after(Millis(10000))); });
  b.recv_all(in.data(), in.size(), Deadline::after(Millis(10000)));
  sender.join();
  EXPECT_EQ(in, out);
}

TEST(Socket, RecvAllThrowsTimeoutErrorAtTheDeadline) {
  auto [a, b] = tcp_pair();
  uint8_t buf[8];
  a.send_all(buf, 3, Deadline::after(Millis(1000)));  // fewer bytes than asked for
  auto t0 = Clock::now();
  EXPECT_THROW(b.recv_all(buf, sizeof(buf), Deadline::after(Millis(150))), TimeoutError);
  EXPECT_GE(since(t0), Millis(140));
  EXPECT_LT(since(t0), Millis(2000));
}

TEST(Socket, SendAllThrowsTimeoutErrorWhenThePeerDoesNotRead) {
  auto [a, b] = tcp_pair();
  a.set_buffer_sizes(16 << 10);
  b.set_buffer_sizes(16 << 10);
  std::vector<uint8_t> big(64 << 20);
  auto t0 = Clock::now();
  EXPECT_THROW(a.send_all(big.data(), big.size(), Deadline::after(Millis(200))), TimeoutError);
  EXPECT_GE(since(t0), Millis(190));
  EXPECT_LT(since(t0), Millis(3000));
}

TEST(Socket, RecvThrowsPeerLostErrorWhenThePeerCloses) {
  auto sockets = tcp_pair();  // named, not bound: lambdas below capture them
  Socket& a = sockets.first;
  Socket& b = sockets.second;
  std::thread closer([&a] {
    std::this_thread::sleep_for(Millis(50));
    a.close();
  });
  uint8_t buf[4];
  auto t0 = Clock::now();
  EXPECT_THROW(b.recv_all(buf, sizeof(buf), Deadline::after(Millis(5000))), PeerLostError);
  EXPECT_LT(since(t0), Millis(2000));  // promptly, not at the deadline
  closer.join();
}

TEST(Socket, SendThrowsPeerLostErrorWhenThePeerIsGone) {
  auto [a, b] = tcp_pair();
  b.close();
  std::vector<uint8_t> data(1 << 20);
  // The first send may land in the buffer; the reset arrives by the second or third.
  EXPECT_THROW(for (int i = 0; i < 50; ++i)
                   a.send_all(data.data(), data.size(), Deadline::after(Millis(2000))),
               PeerLostError);
}

TEST(Socket, SomeCallsDoNotBlock) {
  auto [a, b] = tcp_pair();
  uint8_t buf[16];
  EXPECT_EQ(b.recv_some(buf, sizeof(buf)), 0u);  // nothing there: would block
  EXPECT_EQ(a.send_some("hello", 5), 5u);
  ASSERT_TRUE(wait_fd(b.fd(), POLLIN, Deadline::after(Millis(2000))));
  EXPECT_EQ(b.recv_some(buf, sizeof(buf)), 5u);
}

TEST(Socket, ConnectRetriesUntilTheListenerAppears) {
  uint16_t port;
  {
    Listener probe = Listener::bind("127.0.0.1", 0);
    port = probe.port();
  }  // closed: connections are refused until the listener below binds the port
  std::thread late([port] {
    std::this_thread::sleep_for(Millis(300));
    Listener l = Listener::bind("127.0.0.1", port);
    Socket s = l.accept(Deadline::after(Millis(5000)));
    s.send_all("x", 1, Deadline::after(Millis(1000)));
  });
  auto t0 = Clock::now();
  Socket c = Socket::connect({"127.0.0.1", port}, Deadline::after(Millis(5000)));
  EXPECT_GE(since(t0), Millis(250));
  char x = 0;
  c.recv_all(&x, 1, Deadline::after(Millis(5000)));
  EXPECT_EQ(x, 'x');
  late.join();
}

TEST(Socket, ConnectThrowsTimeoutErrorNamingTheAddress) {
  uint16_t port;
  {
    Listener probe = Listener::bind("127.0.0.1", 0);
    port = probe.port();
  }
  auto t0 = Clock::now();
  try {
    Socket::connect({"127.0.0.1", port}, Deadline::after(Millis(200)));
    FAIL() << "connected to a closed port";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(port)), std::string::npos)
        << e.what();
  }
  EXPECT_LT(since(t0), Millis(2000));
}

TEST(Listener, AcceptThrowsTimeoutErrorWhenNobodyConnects) {
  Listener l = Listener::bind("127.0.0.1", 0);
  EXPECT_NE(l.port(), 0);
  auto t0 = Clock::now();
  EXPECT_THROW(l.accept(Deadline::after(Millis(100))), TimeoutError);
  EXPECT_GE(since(t0), Millis(90));
}

TEST(Socket, PeerAddressNamesTheOtherEnd) {
  Listener l = Listener::bind("127.0.0.1", 0);
  Socket a = Socket::connect({"127.0.0.1", l.port()}, Deadline::after(Millis(5000)));
  Socket b = l.accept(Deadline::after(Millis(5000)));
  EXPECT_EQ(a.peer_address(), "127.0.0.1:" + std::to_string(l.port()));
  EXPECT_EQ(Endpoint::parse(b.peer_address()).host, "127.0.0.1");
}

}  // namespace
}  // namespace cohort::net
