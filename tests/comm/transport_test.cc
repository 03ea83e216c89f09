// The transport conformance suite: every test runs on a TCP pair and on a shared-memory pair,
// through the ring and with the single-copy path, two ends in one process (a real loopback
// connection; for shared memory a real /dev/shm segment with that connection as its doorbell),
// driven through the Pair interface alone, as the exchange engine drives it.
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "cohort/base/clock.h"
#include "cohort/base/error.h"
#include "cohort/comm/transport/shm_pair.h"
#include "cohort/comm/transport/tcp_pair.h"
#include "cohort/net/socket.h"

namespace cohort::comm::transport {
namespace {

using namespace std::chrono_literals;

struct Ends {
  std::unique_ptr<Pair> a;  // rank 0's end (its peer is rank 1)
  std::unique_ptr<Pair> b;  // rank 1's end
};

constexpr size_t kRing = 64 << 10;  // small, so that the tests wrap the rings many times

struct Variant {
  Kind kind;
  size_t single_copy;  // ShmPair's single_copy_bytes (0: through the ring)
  const char* name;
};

Ends make_ends(Kind kind, size_t single_copy = 0) {
  net::Listener l = net::Listener::bind("127.0.0.1", 0);
  net::Socket sa = net::Socket::connect({"127.0.0.1", l.port()}, Deadline::after(5s));
  net::Socket sb = l.accept(Deadline::after(5s));
  if (kind == Kind::Tcp) {
    sa.set_buffer_sizes(static_cast<int>(kRing));
    sb.set_buffer_sizes(static_cast<int>(kRing));
    return {std::make_unique<TcpPair>(1, std::move(sa)),
            std::make_unique<TcpPair>(0, std::move(sb))};
  }
  ShmSegment created = ShmSegment::create(kRing, "test");
  ShmSegment opened = ShmSegment::open(created.name(), kRing);
  created.unlink();
  return {std::make_unique<ShmPair>(1, std::move(sa), std::move(created), true, single_copy),
          std::make_unique<ShmPair>(0, std::move(sb), std::move(opened), false, single_copy)};
}

Ends make_ends(const Variant& v) {
  return make_ends(v.kind, v.single_copy);
}

// Sleeps until `dir` of `p` may progress, as the engine's wait does; false at the deadline.
// `armed`, when given, is set once the pair's wake-up is armed and the thread is about to sleep.
bool wait_for(Pair& p, Direction dir, Deadline deadline, std::atomic<bool>* armed = nullptr) {
  for (;;) {
    pollfd pfd;
    if (p.watch(dir, /*arm=*/true, &pfd)) {
      p.woke(dir, 0);
      return true;
    }
    if (armed) armed->store(true);
    ::poll(&pfd, 1, deadline.poll_timeout_ms());
    if (p.woke(dir, pfd.revents)) return true;
    if (deadline.expired()) return false;
  }
}

void recv_all(Pair& p, uint8_t* data, size_t n, std::mt19937& rng, Deadline deadline) {
  size_t off = 0;
  while (off < n) {
    const size_t want = std::min<size_t>(n - off, 1 + rng() % (2 * kRing));
    size_t k = p.recv_some(data + off, want);
    off += k;
    if (k < want && off < n) {
      ASSERT_TRUE(wait_for(p, Direction::Recv, deadline)) << "recv stalled at " << off;
    }
  }
}

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937 rng(seed);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

class Transport : public ::testing::TestWithParam<Variant> {};

// One end sends `out` while it receives into `in`, on one thread, waiting on both directions in
// one poll as the exchange engine does (a pair is used by one thread at a time).
void duplex(Pair& p, const std::vector<uint8_t>& out, std::vector<uint8_t>& in, uint32_t seed,
            Deadline deadline) {
  std::mt19937 rng(seed);
  size_t sent = 0, got = 0;
  bool send_blocked = false, recv_blocked = false;
  size_t piece_end = 0;  // the piece being sent: the rest of it goes with the next call
  while (sent < out.size() || got < in.size()) {
    if (sent < out.size() && !send_blocked) {
      // Pieces of random size, split over two buffers, like a header and its payload.
      if (sent == piece_end)
        piece_end += std::min<size_t>(out.size() - sent, 1 + rng() % (3 * kRing));
      const size_t piece = piece_end - sent;
      const size_t first = std::min<size_t>(piece, rng() % 64);
      iovec iov[2] = {{const_cast<uint8_t*>(out.data() + sent), first},
                      {const_cast<uint8_t*>(out.data() + sent + first), piece - first}};
      const size_t k = p.send_some(iov, 2, Delivery::Rendezvous);
      sent += k;
      send_blocked = k < piece;
    }
    if (got < in.size() && !recv_blocked) {
      const size_t want = std::min<size_t>(in.size() - got, 1 + rng() % (2 * kRing));
      const size_t k = p.recv_some(in.data() + got, want);
      got += k;
      recv_blocked = k < want;
    }
    if (sent == out.size() && got == in.size()) break;
    const bool wait_send = sent < out.size() && send_blocked;
    const bool wait_recv = got < in.size() && recv_blocked;
    if ((sent < out.size() && !wait_send) || (got < in.size() && !wait_recv)) continue;
    pollfd fds[2] = {{-1, 0, 0}, {-1, 0, 0}};
    bool ready_send = wait_send && p.watch(Direction::Send, true, &fds[0]);
    bool ready_recv = wait_recv && p.watch(Direction::Recv, true, &fds[1]);
    if (!ready_send && !ready_recv) ::poll(fds, 2, deadline.poll_timeout_ms());
    ready_send = (wait_send && p.woke(Direction::Send, fds[0].revents)) || ready_send;
    ready_recv = (wait_recv && p.woke(Direction::Recv, fds[1].revents)) || ready_recv;
    if (ready_send) send_blocked = false;
    if (ready_recv) recv_blocked = false;
    ASSERT_FALSE(deadline.expired()) << "stalled having sent " << sent << " and received " << got;
  }
}

TEST_P(Transport, BytesArriveInOrderBothWaysAtOnceAcrossManyWrapArounds) {
  Ends e = make_ends(GetParam());
  const size_t n = 5 << 20;  // 80 times the ring
  const auto ab = pattern(n, 1), ba = pattern(n, 2);
  std::vector<uint8_t> got_ab(n), got_ba(n);
  const Deadline deadline = Deadline::after(60s);
  // Both directions are full at once: each end must keep reading while its sends wait.
  std::thread ta([&] { duplex(*e.a, ab, got_ba, 3, deadline); });
  std::thread tb([&] { duplex(*e.b, ba, got_ab, 4, deadline); });
  ta.join();
  tb.join();
  EXPECT_TRUE(got_ab == ab);
  EXPECT_TRUE(got_ba == ba);
}

TEST_P(Transport, AFullPairTakesNothingMoreUntilItsPeerReads) {
  Ends e = make_ends(GetParam());
  std::vector<uint8_t> big(64 << 20, 7);
  iovec iov{big.data(), big.size()};
  size_t sent = 0;
  // Fill it: TCP's kernel buffers may keep growing a little, so send until nothing fits.
  for (size_t k; (k = e.a->send_some(&iov, 1, Delivery::Rendezvous)) > 0;) {
    sent += k;
    iov = {big.data() + sent, big.size() - sent};
  }
  if (GetParam().single_copy == 0) {
    ASSERT_GT(sent, 0u);  // single copy: nothing is taken until the peer reads
  }
  ASSERT_LT(sent, big.size());
  pollfd pfd;
  EXPECT_FALSE(e.a->watch(Direction::Send, false, &pfd));
  // The peer reads: the sender is woken and takes more.
  std::thread reader([&] {
    std::vector<uint8_t> buf(kRing);
    std::mt19937 rng(1);
    recv_all(*e.b, buf.data(), buf.size(), rng, Deadline::after(10s));
  });
  EXPECT_TRUE(wait_for(*e.a, Direction::Send, Deadline::after(10s)));
  reader.join();
  EXPECT_GT(e.a->send_some(&iov, 1, Delivery::Rendezvous), 0u);
}

TEST_P(Transport, NothingToReadIsNotReadyAndWaitingTimesOut) {
  Ends e = make_ends(GetParam());
  uint8_t b;
  EXPECT_EQ(e.b->recv_some(&b, 1), 0u);
  pollfd pfd;
  EXPECT_FALSE(e.b->watch(Direction::Recv, false, &pfd));
  const auto t0 = Clock::now();
  EXPECT_FALSE(wait_for(*e.b, Direction::Recv, Deadline::after(100ms)));
  EXPECT_GE(Clock::now() - t0, 90ms);
}

TEST_P(Transport, DataSentBeforeThePeerWentAwayIsReadThenThePeerIsLost) {
  Ends e = make_ends(GetParam());
  const auto data = pattern(1000, 9);
  iovec iov{const_cast<uint8_t*>(data.data()), data.size()};
  ASSERT_EQ(e.a->send_some(&iov, 1, Delivery::Rendezvous), data.size());
  e.a.reset();  // the peer's process ends: its end closes
  std::vector<uint8_t> got(data.size());
  std::mt19937 rng(1);
  recv_all(*e.b, got.data(), got.size(), rng, Deadline::after(5s));
  EXPECT_TRUE(got == data);
  EXPECT_TRUE(wait_for(*e.b, Direction::Recv, Deadline::after(5s)));
  uint8_t b;
  try {
    e.b->recv_some(&b, 1);
    ADD_FAILURE() << "read from a peer that is gone";
  } catch (const PeerLostError& err) {
    EXPECT_EQ(err.rank(), 0);  // b's peer
  }
}

TEST_P(Transport, SendingToAPeerThatShutItsEndDownFails) {
  Ends e = make_ends(GetParam());
  e.b->shutdown();
  std::vector<uint8_t> data(4096, 1);
  iovec iov{data.data(), data.size()};
  // TCP may take a first write into its buffers before the reset comes back; either way the
  // sender learns within a few writes and a wait.
  bool lost = false;
  for (int i = 0; i < 100 && !lost; ++i) {
    try {
      if (e.a->send_some(&iov, 1, Delivery::Rendezvous) == 0)
        wait_for(*e.a, Direction::Send, Deadline::after(1s));
    } catch (const PeerLostError& err) {
      EXPECT_EQ(err.rank(), 1);
      lost = true;
    }
  }
  EXPECT_TRUE(lost);
}

TEST_P(Transport, ShutdownWakesAThreadSleepingOnThePair) {
  Ends e = make_ends(GetParam());
  const auto t0 = Clock::now();
  std::atomic<bool> armed{false};
  std::thread waiter([&] {
    EXPECT_TRUE(wait_for(*e.b, Direction::Recv, Deadline::after(20s), &armed));
    uint8_t b;
    EXPECT_THROW(e.b->recv_some(&b, 1), PeerLostError);
  });
  // Once its wake-up is armed, the shutdown must wake it (whether or not it is in poll yet).
  while (!armed.load()) std::this_thread::yield();
  e.b->shutdown();
  waiter.join();
  EXPECT_LT(Clock::now() - t0, 5s);
}

INSTANTIATE_TEST_SUITE_P(Kinds, Transport,
                         ::testing::Values(Variant{Kind::Tcp, 0, "tcp"},
                                           Variant{Kind::Shm, 0, "shm"},
                                           Variant{Kind::Shm, 1024, "shm_single_copy"}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(ShmSegment, ItsNameIsGoneOnceBothSidesHaveIt) {
  ShmSegment created = ShmSegment::create(kRing, "test");
  const std::string path = "/dev/shm" + created.name();
  EXPECT_TRUE(std::filesystem::exists(path));
  ShmSegment opened = ShmSegment::open(created.name(), kRing);
  EXPECT_FALSE(std::filesystem::exists(path));
  created.unlink();  // a second removal is harmless
}

TEST(ShmSegment, ACreatorThatGoesAwayBeforeAnyoneOpensItLeavesNothing) {
  std::string path;
  {
    ShmSegment created = ShmSegment::create(kRing, "test");
    path = "/dev/shm" + created.name();
    EXPECT_TRUE(std::filesystem::exists(path));
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(ShmSegment, OpeningWhatIsNotASegmentOfTheAnnouncedSizeIsRefused) {
  ShmSegment created = ShmSegment::create(kRing, "test");
  EXPECT_THROW(ShmSegment::open(created.name(), kRing * 2), ProtocolError);
  ShmSegment other = ShmSegment::create(kRing, "test");
  EXPECT_THROW(ShmSegment::open("/etc/passwd", kRing), ProtocolError);
  EXPECT_THROW(ShmSegment::open("/cohort-../../etc/passwd", kRing), ProtocolError);
  EXPECT_THROW(ShmSegment::open("/cohort-missing", kRing), SystemError);
  EXPECT_THROW(ShmSegment::open(other.name(), 12345), ProtocolError);
}

TEST(ShmSegment, RingSizesMustBePowersOfTwo) {
  EXPECT_THROW(ShmSegment::create(100000, "test"), ConfigError);
  EXPECT_THROW(ShmSegment::create(1024, "test"), ConfigError);
}

// Single copy: the receiver copies a large send out of the sender's own memory.

struct Halves {  // what make_ends joins, for ends in two processes
  net::Socket sa, sb;
  ShmSegment created, opened;
};

Halves halves() {
  net::Listener l = net::Listener::bind("127.0.0.1", 0);
  Halves h;
  h.sa = net::Socket::connect({"127.0.0.1", l.port()}, Deadline::after(5s));
  h.sb = l.accept(Deadline::after(5s));
  h.created = ShmSegment::create(kRing, "test");
  h.opened = ShmSegment::open(h.created.name(), kRing);
  h.created.unlink();
  return h;
}

// Sends all of `data` through `p` as the exchange engine does; false at the deadline.
bool send_all(Pair& p, const uint8_t* data, size_t n, Deadline deadline) {
  for (size_t sent = 0; sent < n;) {
    iovec iov{const_cast<uint8_t*>(data + sent), n - sent};
    const size_t k = p.send_some(&iov, 1, Delivery::Rendezvous);
    sent += k;
    if (sent < n && !wait_for(p, Direction::Send, deadline)) return false;
  }
  return true;
}

// A receiver that takes what the pair shows in place (Pair::peek) and copies the rest, in pieces
// of random size, gets the stream that was sent, in order; bytes it was shown stay as they were
// until it gives them back, however much the sender writes meanwhile. A pair without a view shows
// nothing, and every byte comes through recv_some.
TEST_P(Transport, BytesShownInPlaceAreTheStreamAndStayUntilGivenBack) {
  Ends e = make_ends(GetParam());
  const size_t n = 5 << 20;  // 80 times the ring
  const auto data = pattern(n, 11);
  const Deadline deadline = Deadline::after(60s);
  bool sent = false;
  std::thread sender([&] { sent = send_all(*e.a, data.data(), n, deadline); });
  std::mt19937 rng(12);
  std::vector<uint8_t> copied(kRing);
  size_t got = 0, shown_in_place = 0, mismatches = 0;
  while (got < n && !deadline.expired()) {
    const uint8_t* at = nullptr;
    const size_t k = std::min(e.b->peek(&at), n - got);
    if (k > 0) {
      ASSERT_TRUE(e.b->has_view());
      if (std::memcmp(at, data.data() + got, k) != 0) ++mismatches;
      // Now and then look again, while the sender goes on writing into the rest of the ring:
      // the same bytes at the same place, and at least as many. Then give back a random part.
      if (rng() % 4 == 0) {
        std::this_thread::yield();
        const uint8_t* again = nullptr;
        const size_t k2 = e.b->peek(&again);
        if (again != at || k2 < k || std::memcmp(at, data.data() + got, k) != 0) ++mismatches;
      }
      const size_t m = 1 + rng() % k;
      e.b->consume(m);
      got += m;
      shown_in_place += m;
      continue;
    }
    EXPECT_EQ(at, nullptr);
    const size_t want = std::min<size_t>(n - got, 1 + rng() % kRing);
    const size_t c = e.b->recv_some(copied.data(), want);
    if (std::memcmp(copied.data(), data.data() + got, c) != 0) ++mismatches;
    got += c;
    if (c == 0) {
      ASSERT_TRUE(wait_for(*e.b, Direction::Recv, deadline)) << "stalled at " << got;
    }
  }
  sender.join();
  EXPECT_TRUE(sent);
  EXPECT_EQ(got, n);
  EXPECT_EQ(mismatches, 0u);
  if (GetParam().kind == Kind::Tcp) {
    EXPECT_EQ(shown_in_place, 0u);
  } else if (GetParam().single_copy == 0) {
    EXPECT_GT(shown_in_place, n / 4);  // most of it: copies are the smaller of each choice
  }
}

// Forks a process that sends `data` then `tail` from h's first end (the second stays here) and
// exits 0 when all of it was taken.
pid_t fork_sender(Halves& h, const std::vector<uint8_t>& data, const std::vector<uint8_t>& tail,
                  bool dumpable) {
  const pid_t child = ::fork();
  if (child == 0) {
    h.sb.close();
    if (!dumpable && ::prctl(PR_SET_DUMPABLE, 0) != 0) ::_exit(2);
    ShmPair a(1, std::move(h.sa), std::move(h.created), true, 4096);
    const Deadline d = Deadline::after(30s);
    const bool ok =
        send_all(a, data.data(), data.size(), d) && send_all(a, tail.data(), tail.size(), d);
    ::_exit(ok ? 0 : 1);
  }
  h.sa.close();
  return child;
}

TEST(ShmSingleCopy, TheReceiverReadsTheSendersOwnBytesAndTheyStayInOrderWithTheRings) {
  Ends e = make_ends(Kind::Shm, 1024);
  const auto small = pattern(100, 1);
  std::vector<uint8_t> big(256 << 10, 1);
  iovec first{const_cast<uint8_t*>(small.data()), small.size()};
  ASSERT_EQ(e.a->send_some(&first, 1, Delivery::Rendezvous),
            small.size());  // under the threshold: into the ring
  iovec iov{big.data(), big.size()};
  ASSERT_EQ(e.a->send_some(&iov, 1, Delivery::Rendezvous), 0u);  // described, nothing copied
  // Callers must not touch bytes in flight; here it shows that the receiver reads them where
  // they are, after the ring's bytes that came before them.
  std::fill(big.begin(), big.end(), uint8_t{2});
  std::vector<uint8_t> got(small.size() + big.size());
  std::mt19937 rng(1);
  recv_all(*e.b, got.data(), got.size(), rng, Deadline::after(10s));
  EXPECT_TRUE(std::equal(small.begin(), small.end(), got.begin()));
  EXPECT_TRUE(std::all_of(got.begin() + static_cast<long>(small.size()), got.end(),
                          [](uint8_t b) { return b == 2; }));
  ASSERT_TRUE(wait_for(*e.a, Direction::Send, Deadline::after(5s)));
  EXPECT_EQ(e.a->send_some(&iov, 1, Delivery::Rendezvous), big.size());
}

TEST(ShmSingleCopy, ABufferedSendFillsTheRingWithoutWaitingForItsReader) {
  Ends e = make_ends(Kind::Shm, 1024);
  const auto data = pattern(256 << 10, 4);
  iovec iov{const_cast<uint8_t*>(data.data()), data.size()};
  // A point-to-point send: its recv may come after it, so it must not wait for it.
  EXPECT_EQ(e.a->send_some(&iov, 1, Delivery::Buffered), kRing);
  std::vector<uint8_t> got(kRing);
  std::mt19937 rng(3);
  recv_all(*e.b, got.data(), got.size(), rng, Deadline::after(5s));
  EXPECT_TRUE(std::equal(got.begin(), got.end(), data.begin()));
}

TEST(ShmSingleCopy, ASenderInAnotherProcessIsReadThroughTheKernel) {
  Halves h = halves();
  const auto data = pattern(8 << 20, 5);
  const auto tail = pattern(100, 6);
  const pid_t child = fork_sender(h, data, tail, /*dumpable=*/true);
  ASSERT_GE(child, 0);
  ShmPair b(0, std::move(h.sb), std::move(h.opened), false, 4096);
  std::vector<uint8_t> got(data.size() + tail.size());
  std::mt19937 rng(2);
  recv_all(b, got.data(), got.size(), rng, Deadline::after(30s));
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_TRUE(std::equal(data.begin(), data.end(), got.begin()));
  EXPECT_TRUE(std::equal(tail.begin(), tail.end(), got.begin() + static_cast<long>(data.size())));
}

TEST(ShmSingleCopy, ASenderKilledBeforeItsBytesAreReadIsALostPeerNotGarbage) {
  Halves h = halves();
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    h.sb.close();
    ShmPair a(1, std::move(h.sa), std::move(h.created), true, 4096);
    std::vector<uint8_t> big(1 << 20, 3);
    iovec iov{big.data(), big.size()};
    const size_t k =
        a.send_some(&iov, 1, Delivery::Rendezvous);  // described: it waits for a reader
    (void)!::write(ready[1], "x", 1);
    if (k != 0) ::_exit(1);
    ::pause();
    ::_exit(0);
  }
  h.sa.close();
  ::close(ready[1]);
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  ShmPair b(0, std::move(h.sb), std::move(h.opened), false, 4096);
  ::kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  // It is found gone (its pid no longer answers, its doorbell is closed), as over TCP; nothing
  // of what it described is ever returned.
  std::vector<uint8_t> got(1 << 20, 0);
  size_t read = 0;
  bool lost = false;
  const Deadline d = Deadline::after(10s);
  while (!lost && !d.expired()) {
    try {
      read += b.recv_some(got.data(), got.size());
      if (!wait_for(b, Direction::Recv, d)) break;
    } catch (const PeerLostError& err) {
      EXPECT_EQ(err.rank(), 0);  // b's peer
      lost = true;
    }
  }
  EXPECT_TRUE(lost);
  EXPECT_EQ(read, 0u);
}

// Drops CAP_SYS_PTRACE from this process's effective set (as a user without it runs).
bool drop_ptrace_capability() {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capget, &hdr, data) != 0) return false;
  data[CAP_SYS_PTRACE / 32].effective &= ~(1u << (CAP_SYS_PTRACE % 32));
  return ::syscall(SYS_capset, &hdr, data) == 0;
}

TEST(ShmSingleCopy, AReceiverThatMayNotReadTheSenderGetsTheBytesThroughTheRing) {
  Halves h = halves();
  const auto data = pattern(1 << 20, 7);
  const auto tail = pattern(100, 8);
  // Not dumpable: only a process with CAP_SYS_PTRACE may read its memory.
  const pid_t sender = fork_sender(h, data, tail, /*dumpable=*/false);
  ASSERT_GE(sender, 0);
  const pid_t receiver = ::fork();
  ASSERT_GE(receiver, 0);
  if (receiver == 0) {
    if (!drop_ptrace_capability()) ::_exit(2);
    // The premise: this process may not read the sender's memory.
    uint8_t probe;
    iovec local{&probe, 1}, remote{const_cast<uint8_t*>(data.data()), 1};
    for (int i = 0; i < 1000 && ::process_vm_readv(sender, &local, 1, &remote, 1, 0) == 1; ++i) {
      ::usleep(1000);  // until the sender has made itself not dumpable
    }
    if (::process_vm_readv(sender, &local, 1, &remote, 1, 0) == 1 || errno != EPERM) ::_exit(3);
    ShmPair b(0, std::move(h.sb), std::move(h.opened), false, 4096);
    std::vector<uint8_t> got(data.size() + tail.size());
    size_t off = 0;
    const Deadline d = Deadline::after(30s);
    while (off < got.size()) {
      off += b.recv_some(got.data() + off, got.size() - off);
      if (off < got.size() && !wait_for(b, Direction::Recv, d)) ::_exit(4);
    }
    const bool same = std::equal(data.begin(), data.end(), got.begin()) &&
                      std::equal(tail.begin(), tail.end(), got.begin() + (1 << 20));
    ::_exit(same ? 0 : 5);
  }
  h.sb.close();
  int status = 0;
  ASSERT_EQ(::waitpid(receiver, &status, 0), receiver);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "receiver: " << status;
  ASSERT_EQ(::waitpid(sender, &status, 0), sender);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "sender: " << status;
}

TEST(ShmSingleCopy, BytesOfASendAbandonedByAFailedOperationAreNeverRead) {
  Ends e = make_ends(Kind::Shm, 1024);
  std::vector<uint8_t> big(256 << 10, 1);
  iovec iov{big.data(), big.size()};
  ASSERT_EQ(e.a->send_some(&iov, 1, Delivery::Rendezvous), 0u);
  e.a->abandon_send();  // its operation failed: the buffer may go away now
  std::vector<uint8_t> got(big.size());
  EXPECT_EQ(e.b->recv_some(got.data(), got.size()), 0u);
  pollfd pfd;
  EXPECT_FALSE(e.b->watch(Direction::Recv, false, &pfd));
  e.a->shutdown();  // and the failure's handling closes the pair
  ASSERT_TRUE(wait_for(*e.b, Direction::Recv, Deadline::after(5s)));
  EXPECT_THROW(e.b->recv_some(got.data(), got.size()), PeerLostError);
}

}  // namespace
}  // namespace cohort::comm::transport
