// What happens when things go wrong: mismatched collectives, a rank that never shows up, abort,
// a rank that disappears mid-collective, and hostile connections during setup.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <future>
#include <thread>

#include "cohort/base/clock.h"
#include "cohort/base/error.h"
#include "cohort/comm/communicator.h"
#include "cohort/comm/mesh_doorman.h"
#include "cohort/net/frame.h"
#include "cohort/net/handshake.h"
#include "cohort/net/socket.h"
#include "world.h"

namespace cohort::comm {
namespace {

using namespace std::chrono_literals;
using testing::World;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

using testing::caught;
using testing::message_of;

TEST(Failure, MismatchedCollectivesFailWithProtocolErrorInsteadOfHanging) {
  const int n = 3;
  World world(n, [](CommConfig& c) { c.timeout = 20s; });
  std::vector<std::exception_ptr> errors(n);
  const auto start = Clock::now();
  world.run([&](int r, Communicator& comm) {
    std::vector<float> buf(3 * 64, 1.0f), in(64, 1.0f);
    errors[r] = caught([&] {
      if (r == 1) {
        comm.allgather(Buffer{DType::F32, in.data(), 64}, Buffer{DType::F32, buf.data(), 3 * 64})
            ->wait();
      } else {
        comm.allreduce(Buffer{DType::F32, buf.data(), buf.size()}, {.algorithm = Algorithm::Ring})
            ->wait();
      }
    });
  });
  EXPECT_LT(seconds_since(start), 5.0) << "a mismatch must be detected, not waited out";
  for (int r = 0; r < n; ++r) ASSERT_TRUE(errors[r]) << "rank " << r << " did not fail";
  // Rank 2 receives from rank 1, rank 1 from rank 0: both see the other kind of collective.
  EXPECT_NE(message_of(errors[2]).find("rank 1 sent allgather #1 but this rank is in allreduce #1"),
            std::string::npos)
      << message_of(errors[2]);
  EXPECT_NE(message_of(errors[1]).find("rank 0 sent allreduce #1 but this rank is in allgather #1"),
            std::string::npos)
      << message_of(errors[1]);
  EXPECT_THROW(std::rethrow_exception(errors[2]), ProtocolError);
  // A failed communicator stays failed, with the same error.
  float x = 0;
  auto later = world[2].allreduce(Buffer{DType::F32, &x, 1});
  EXPECT_TRUE(later->failed());
  EXPECT_EQ(message_of(caught([&] { later->wait(); })), message_of(errors[2]));
}

TEST(Failure, TimeoutNamesTheRankThatNeverCalledNotTheNeighbourWaitingOnIt) {
  // Ring 0 -> 1 -> 2 -> 3 -> 0 without rank 2: rank 0 waits on rank 3, which waits on rank 2
  // (through rank 3's own stall). Every rank must name rank 2.
  const int n = 4;
  const auto timeout = 1000ms;
  World world(n);
  std::vector<std::exception_ptr> errors(n);
  std::vector<double> took(n);
  world.run([&](int r, Communicator& comm) {
    if (r == 2) return;
    std::vector<float> buf(10000, 1.0f);
    auto start = Clock::now();
    errors[r] = caught([&] {
      comm.allreduce(Buffer{DType::F32, buf.data(), buf.size()},
                     {.algorithm = Algorithm::Ring, .timeout = timeout})
          ->wait();
    });
    took[r] = seconds_since(start);
  });
  for (int r : {0, 1, 3}) {
    ASSERT_TRUE(errors[r]) << "rank " << r;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const CollectiveTimeoutError& e) {
      EXPECT_EQ(e.collective(), "allreduce");
      EXPECT_EQ(e.sequence(), 1u);
      EXPECT_EQ(e.missing_ranks(), std::vector<int>{2}) << "rank " << r << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find("allreduce #1"), std::string::npos);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << r << " got " << e.what();
    }
    // timeout + grace (timeout / 4) + scheduling slack
    EXPECT_LT(took[r], 1.0 + 0.25 + 1.0) << "rank " << r;
    EXPECT_GE(took[r], 0.99) << "rank " << r;
  }
  // The late rank finds its peers gone and fails fast instead of waiting out its own timeout.
  std::vector<float> buf(10000, 1.0f);
  auto start = Clock::now();
  auto e = caught([&] { world[2].allreduce(Buffer{DType::F32, buf.data(), buf.size()})->wait(); });
  EXPECT_LT(seconds_since(start), 3.0);
  try {
    std::rethrow_exception(e);
  } catch (const PeerLostError& lost) {
    EXPECT_NE(std::string(lost.what()).find("giving up on this rank"), std::string::npos)
        << lost.what();
  } catch (const std::exception& other) {
    ADD_FAILURE() << "rank 2 got " << other.what();
  }
}

TEST(Failure, TwoRankTimeoutNamesThePeer) {
  World world(2);
  float x = 1;
  auto e = caught([&] { world[0].barrier({.timeout = 300ms})->wait(); });
  try {
    std::rethrow_exception(e);
  } catch (const CollectiveTimeoutError& t) {
    EXPECT_EQ(t.collective(), "barrier");
    EXPECT_EQ(t.missing_ranks(), std::vector<int>{1});
  }
  (void)x;
}

// Waits (up to 10 s) until `comm`'s flight recorder shows a collective that `is` picks in the
// started state: the rank is then in its exchange, not still on the way to it.
template <typename Pred>
void wait_until_started(Communicator& comm, Pred is) {
  const auto deadline = Clock::now() + 10s;
  while (Clock::now() < deadline) {
    for (const CollectiveRecord& r : comm.flight_recorder().snapshot().records) {
      if (is(r) && r.state == CollectiveState::Started) return;
    }
    std::this_thread::sleep_for(1ms);
  }
  ADD_FAILURE() << "rank " << comm.rank() << " did not start the collective within 10 s";
}

TEST(Failure, AbortUnblocksAPendingAllreducePromptly) {
  World world(2);
  std::vector<float> a(1000, 1.0f), b(1000, 1.0f);
  // Rank 1 never joins: rank 0's allreduce blocks until aborted.
  auto w1 = world[0].allreduce(Buffer{DType::F32, a.data(), a.size()});
  auto w2 = world[0].allreduce(Buffer{DType::F32, b.data(), b.size()});  // queued behind it
  wait_until_started(world[0], [&](const CollectiveRecord& r) { return r.seq == w1->sequence(); });
  EXPECT_FALSE(w1->is_completed());
  const auto start = Clock::now();
  std::thread aborter([&] { world[0].abort("test says stop"); });
  EXPECT_THROW(w1->wait(), AbortedError);
  EXPECT_LT(seconds_since(start), 1.0);
  EXPECT_THROW(w2->wait(), AbortedError);
  aborter.join();
  EXPECT_NE(message_of(caught([&] { w1->wait(); })).find("test says stop"), std::string::npos);
  EXPECT_THROW(world[0].barrier()->wait(), AbortedError);
  // Rank 1 joins late: it gets the data rank 0 sent before the abort, then learns that rank 0
  // is gone, at once rather than at its timeout.
  std::vector<float> c(1000, 1.0f);
  const auto late = Clock::now();
  try {
    world[1].allreduce(Buffer{DType::F32, c.data(), c.size()}, {.timeout = 10s})->wait();
    ADD_FAILURE() << "rank 1 completed an allreduce without rank 0";
  } catch (const PeerLostError& e) {
    EXPECT_EQ(e.rank(), 0) << e.what();
  }
  EXPECT_LT(seconds_since(late), 2.0);
}

TEST(Failure, DestroyedRankIsNamedByEveryOtherRank) {
  const int n = 3;
  World world(n, [](CommConfig& c) { c.timeout = 20s; });
  std::vector<std::exception_ptr> errors(n);
  const auto start = Clock::now();
  world.run([&](int r, Communicator& comm) {
    if (r == 2) {
      // Busy in an operation that cannot finish (nobody sends to it), then destroyed.
      int32_t x;
      auto w = comm.recv(Buffer{DType::I32, &x, 1}, 0, {.tag = 99});
      // Destroyed once the others are inside their allreduce.
      for (int other : {0, 1}) {
        wait_until_started(world[other],
                           [](const CollectiveRecord& c) { return c.kind == OpKind::Allreduce; });
      }
      world.slot(2).reset();
      EXPECT_THROW(w->wait(), AbortedError);
      return;
    }
    std::vector<float> buf(100000, 1.0f);
    errors[r] = caught([&] {
      comm.allreduce(Buffer{DType::F32, buf.data(), buf.size()}, {.algorithm = Algorithm::Ring})
          ->wait();
    });
  });
  EXPECT_LT(seconds_since(start), 5.0);
  for (int r : {0, 1}) {
    try {
      std::rethrow_exception(errors[r]);
    } catch (const PeerLostError& e) {
      EXPECT_EQ(e.rank(), 2) << "rank " << r << ": " << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << r << " got " << e.what();
    }
  }
}

// The last rank of a world of `n` never comes: every rank that did fails setup naming it.
void expect_setup_to_name_the_last_rank(int n, int connect_all_up_to, const std::string& says) {
  store::MemoryStore store;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n - 1));
  testing::on_threads(n - 1, [&](int r) {
    CommConfig c = testing::test_config(r, n);
    c.timeout = 500ms;
    c.connect_all_up_to = connect_all_up_to;
    errors[r] = caught([&] { Communicator::create(store, c); });
  });
  for (int r = 0; r < n - 1; ++r) {
    ASSERT_TRUE(errors[r]);
    EXPECT_THROW(std::rethrow_exception(errors[r]), TimeoutError);
    EXPECT_NE(message_of(errors[r]).find(says + std::to_string(n - 1)), std::string::npos)
        << message_of(errors[r]);
  }
}

TEST(Failure, SetupTimeoutNamesTheMissingRank) {
  expect_setup_to_name_the_last_rank(3, 64, "ranks never connected: ");
}

TEST(Failure, SetupTimeoutNamesTheMissingRankWhenPairsConnectOnFirstUse) {
  expect_setup_to_name_the_last_rank(4, 1, "ranks never joined: ");
}

// Rank 0 published its address and then gave the setup up: its listener is gone, and every dial
// of rank 1 is refused. Told to give up too, rank 1 stops dialling within a setup slice, not at
// the setup's deadline.
TEST(Failure, ARankToldToGiveUpStopsDiallingAPeerWhoseListenerIsGone) {
  store::MemoryStore store;
  CommConfig c = testing::test_config(1, 2);
  c.timeout = 20s;
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  c.setup_cancelled = cancel;
  uint16_t closed_port = 0;
  {
    net::Listener gone = net::Listener::bind("127.0.0.1", 0);
    closed_port = gone.port();
  }
  store.set(c.store_prefix + "/addr/0",
            store::to_bytes(net::Endpoint{"127.0.0.1", closed_port}.str()));
  auto setup = std::async(std::launch::async,
                          [&] { return caught([&] { Communicator::create(store, c); }); });
  ASSERT_EQ(setup.wait_for(500ms), std::future_status::timeout) << "setup ended untold";
  const auto told = Clock::now();
  cancel->store(true);
  ASSERT_EQ(setup.wait_for(5s), std::future_status::ready) << "still dialling after being told";
  EXPECT_LT(seconds_since(told), 1.0);
  const std::exception_ptr error = setup.get();
  EXPECT_THROW(std::rethrow_exception(error), AbortedError) << message_of(error);
  EXPECT_NE(message_of(error).find("rank 1 of 2 was told to give up"), std::string::npos)
      << message_of(error);
}

// A world whose pairs connect on first use agrees on its hosts through two store records: each
// rank's "joined/<rank>" ("<host> cpus=C shm=0|1") and rank 0's "world" ("<host number of each
// rank> shm=0|1 per_cpu=K"). A record that does not read so (a store shared with something else,
// another version of Cohort) fails setup with a ProtocolError naming the record, never a world with
// wrong hosts.
TEST(Failure, MalformedRendezvousRecordsFailSetupNamingTheRecord) {
  struct Case {
    std::string key, value;
    int rank;  // the rank that reads the record
    std::string says;
  };
  const std::vector<Case> cases = {
      {"joined/1", "host-and-no-flag", 0, "malformed record of rank 1"},
      {"joined/1", "host cpus=2 shm=2", 0, "malformed record of rank 1"},
      {"joined/1", "host cpus=2 shm=1 ", 0, "malformed record of rank 1"},
      {"joined/1", "host shm=1", 0, "malformed record of rank 1"},
      {"joined/1", "host cpus=0 shm=1", 0, "malformed record of rank 1"},
      {"joined/1", "host cpus=2x shm=1", 0, "malformed record of rank 1"},
      {"joined/1", "cpus=2 shm=1", 0, "malformed record of rank 1"},
      {"joined/1", "", 0, "malformed record of rank 1"},
      {"world", "0 x shm=1 per_cpu=1", 1, "malformed world record"},
      {"world", "0 0", 1, "malformed world record"},
      {"world", "0 -1 shm=0 per_cpu=1", 1, "malformed world record"},
      {"world", "0 0 shm=yes per_cpu=1", 1, "malformed world record"},
      {"world", "0 0 shm=1", 1, "malformed world record"},
      {"world", "0 0 shm=1 per_cpu=0", 1, "malformed world record"},
      {"world", "0 0 shm=1 per_cpu=2x", 1, "malformed world record"},
      {"world", "0 0 shm=1 crowded=0", 1, "malformed world record"},
      {"world", "0 0 shm=1 per_cpu=1 more", 1, "malformed world record"},
      {"world", "", 1, "malformed world record"},
  };
  for (const Case& c : cases) {
    CommConfig config = testing::test_config(c.rank, 2);
    config.timeout = 5s;
    config.connect_all_up_to = 1;
    store::MemoryStore store;
    store.set(config.store_prefix + "/" + c.key, store::to_bytes(c.value));
    const auto error = caught([&] { Communicator::create(store, config); });
    ASSERT_TRUE(error) << "rank " << c.rank << " accepted " << c.key << " = '" << c.value << "'";
    EXPECT_THROW(std::rethrow_exception(error), ProtocolError) << message_of(error);
    EXPECT_NE(message_of(error).find(c.says), std::string::npos) << message_of(error);
  }
}

TEST(Failure, ARankKilledMidCollectiveIsNamedWhenPairsConnectOnFirstUse) {
  // Rank 2 leaves the collective without a word (its connections cut, as a killed process's
  // would be): ranks that talk to it lose it, the others hear of it from them.
  const int n = 5;
  testing::World world(n, [](CommConfig& c) {
    c.connect_all_up_to = 1;
    c.timeout = 5s;
  });
  std::vector<std::exception_ptr> errors(n);
  world.run([&](int r, Communicator& comm) {
    std::vector<float> v(1 << 16, 1.0f);
    comm.allreduce(Buffer{DType::F32, v.data(), v.size()})->wait();  // every pair it needs is up
    if (r == 2) {
      comm.cut_connections();
      return;
    }
    errors[r] = caught([&] {
      for (int i = 0; i < 100; ++i) comm.allreduce(Buffer{DType::F32, v.data(), v.size()})->wait();
    });
  });
  for (int r = 0; r < n; ++r) {
    if (r == 2) continue;
    ASSERT_TRUE(errors[r]) << "rank " << r << " went on without rank 2";
    int culprit = -1;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const PeerLostError& e) {
      culprit = e.rank();
    } catch (const CollectiveTimeoutError& e) {
      culprit = e.missing_ranks().empty() ? -1 : e.missing_ranks().front();
    } catch (...) {
    }
    EXPECT_EQ(culprit, 2) << "rank " << r << ": " << message_of(errors[r]);
  }
}

TEST(Failure, HostileConnectionsDuringSetupAreDroppedAndSetupCompletes) {
  const int n = 3;
  store::MemoryStore store;
  std::vector<std::unique_ptr<Communicator>> comms(n);
  std::atomic<bool> attacked{false};
  auto make = [&](int r) {
    CommConfig c = testing::test_config(r, n);
    c.handshake_timeout = 500ms;
    comms[r] = Communicator::create(store, c);
  };
  std::thread rank0([&] { make(0); });
  std::thread attacker([&] {
    store.wait({"comm/addr/0"}, 10s);
    auto ep = net::Endpoint::parse(store::to_string(store.get("comm/addr/0")));
    auto dl = Deadline::after(5s);
    std::vector<net::Socket> keep;
    // 1. Random garbage.
    {
      auto s = net::Socket::connect(ep, dl);
      std::string junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
      s.send_all(junk.data(), junk.size(), dl);
      keep.push_back(std::move(s));
    }
    // 2. A frame header announcing 1 TB.
    {
      auto s = net::Socket::connect(ep, dl);
      net::FrameHeader h;
      h.type = static_cast<uint16_t>(net::MsgType::kHello);
      h.length = uint64_t{1} << 40;
      s.send_all(&h, sizeof(h), dl);
      keep.push_back(std::move(s));
    }
    // 3. The wrong token.
    {
      auto s = net::Socket::connect(ep, dl);
      EXPECT_THROW(net::handshake_as_client(s, "wrong-token", "rank=1 size=3", dl), AuthError);
    }
    // 4. The right token but a rank that does not exist, and a world of the wrong size.
    for (const char* info : {"rank=7 size=3", "rank=1 size=4", "rank=0 size=3", "nonsense"}) {
      auto s = net::Socket::connect(ep, dl);
      net::handshake_as_client(s, "test-token", info, dl);
      keep.push_back(std::move(s));
    }
    // 5. A connection that never says anything, and one that stops half-way through a frame.
    keep.push_back(net::Socket::connect(ep, dl));
    {
      auto s = net::Socket::connect(ep, dl);
      s.send_all("CHRT", 4, dl);
      keep.push_back(std::move(s));
    }
    attacked = true;
    std::this_thread::sleep_for(1500ms);  // hold them open while the real ranks join
  });
  while (!attacked) std::this_thread::sleep_for(10ms);
  testing::on_threads(2, [&](int i) { make(i + 1); });
  rank0.join();
  attacker.join();
  // The world that came out of it works.
  testing::on_threads(n, [&](int r) {
    std::vector<int32_t> v(100, r);
    comms[r]->allreduce(Buffer{DType::I32, v.data(), v.size()})->wait();
    for (int32_t x : v) ASSERT_EQ(x, 0 + 1 + 2);
  });
}

// 100 garbage, truncated and idle connections arrive at the ranks' listening ports while a
// 64-rank communicator forms: none of them holds up the others' handshakes, and it forms within
// its deadline.
TEST(Failure, A64RankWorldFormsThroughAHundredHostileConnections) {
  const int n = 64;
  store::MemoryStore store;
  std::vector<std::unique_ptr<Communicator>> comms(n);
  std::thread attacker([&] {
    std::vector<net::Socket> keep;
    for (int i = 0; i < 100; ++i) {
      const auto dl = Deadline::after(500ms);  // a finished rank's listener refuses at once
      const std::string key = "comm/addr/" + std::to_string((i * 7) % n);
      store.wait({key}, 30s);
      try {
        auto s = net::Socket::connect(net::Endpoint::parse(store::to_string(store.get(key))), dl);
        if (i % 3 == 0) {
          s.send_all("GET / HTTP/1.1\r\n\r\n", 18, dl);  // garbage
        } else if (i % 3 == 1) {
          s.send_all("CHRT\x01\x00", 6, dl);  // a frame header cut short
        }                                     // else: says nothing at all
        keep.push_back(std::move(s));
      } catch (const Error&) {
        // The rank finished its setup and closed its listener: nothing left to attack there.
      }
    }
    std::this_thread::sleep_for(1500ms);  // hold them open past the handshake timeout
  });
  const auto t0 = Clock::now();
  testing::on_threads(n, [&](int r) {
    CommConfig c = testing::test_config(r, n);
    c.transport = Transport::Tcp;  // setup is the subject; 2,016 segments would add nothing
    c.handshake_timeout = 1s;
    c.timeout = 60s;
    comms[r] = Communicator::create(store, c);
  });
  const double setup_s = seconds_since(t0);
  attacker.join();
  EXPECT_LT(setup_s, 60.0);
  testing::on_threads(n, [&](int r) {
    std::vector<int32_t> v(100, r);
    comms[r]->allreduce(Buffer{DType::I32, v.data(), v.size()})->wait();
    for (int32_t x : v) ASSERT_EQ(x, n * (n - 1) / 2);
  });
}

// A connection that keeps sending, a byte at a time and never falling silent for long, but never
// finishes its handshake is closed once its handshake has lasted its lifetime: it cannot hold a
// slot of a world that keeps its listener open (connecting on first use) for as long as its
// frames allow. The world works afterwards.
TEST(Failure, AConnectionThatTricklesItsHandshakeIsClosedAtItsLifetime) {
  const int n = 2;
  const auto silence = 1s;
  store::MemoryStore store;
  std::vector<std::unique_ptr<Communicator>> comms(n);
  testing::on_threads(n, [&](int r) {
    CommConfig c = testing::test_config(r, n);
    c.connect_all_up_to = 1;  // the listener stays open after setup
    c.handshake_timeout = silence;
    comms[r] = Communicator::create(store, c);
  });
  const auto ep = net::Endpoint::parse(store::to_string(store.get("comm/addr/0")));
  auto s = net::Socket::connect(ep, Deadline::after(5s));
  net::FrameHeader h;
  h.type = static_cast<uint16_t>(net::MsgType::kHello);
  h.length = net::kMaxHandshakeFrame;  // as long a hello as the limit allows, sent a byte at a time
  s.send_all(&h, sizeof(h), Deadline::after(5s));
  const auto t0 = Clock::now();
  bool closed = false;
  for (size_t sent = 0; sent < h.length && !closed && seconds_since(t0) < 10; ++sent) {
    pollfd p{s.fd(), POLLIN, 0};
    // A byte every 50 ms: never silent for long enough to be dropped.
    if (::poll(&p, 1, 50) > 0) {
      char c;
      closed = ::recv(s.fd(), &c, 1, 0) <= 0;
    } else {
      const char byte = 'x';
      closed = ::send(s.fd(), &byte, 1, MSG_NOSIGNAL) != 1;
    }
  }
  const double lasted_s = seconds_since(t0);
  ASSERT_TRUE(closed) << "the trickling connection was kept for " << lasted_s << " s";
  const double lifetime_s =
      std::chrono::duration<double>(silence * Doorman::kHandshakeLifetimes).count();
  EXPECT_GE(lasted_s, lifetime_s - 0.1) << "closed before its lifetime: it was not silent";
  EXPECT_LT(lasted_s, lifetime_s + 2.0);
  testing::on_threads(n, [&](int r) {
    std::vector<int32_t> v(100, r + 1);
    comms[r]->allreduce(Buffer{DType::I32, v.data(), v.size()})->wait();
    for (int32_t x : v) ASSERT_EQ(x, 3);
  });
}

TEST(Failure, WrongTokenRankCannotJoin) {
  store::MemoryStore store;
  std::vector<std::exception_ptr> errors(2);
  testing::on_threads(2, [&](int r) {
    CommConfig c = testing::test_config(r, 2);
    c.timeout = 1s;
    if (r == 1) c.token = "another-job";
    errors[r] = caught([&] { Communicator::create(store, c); });
  });
  EXPECT_THROW(std::rethrow_exception(errors[1]), AuthError);
  EXPECT_THROW(std::rethrow_exception(errors[0]), TimeoutError);
  EXPECT_NE(message_of(errors[0]).find("ranks never connected: 1"), std::string::npos);
}

}  // namespace
}  // namespace cohort::comm
