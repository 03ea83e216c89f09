// reduce_scatter, allgather, broadcast, barrier and send/recv on several world sizes.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <tuple>

#include "cohort/comm/communicator.h"
#include "data.h"
#include "world.h"

namespace cohort::comm {
namespace {

using testing::Wires;
using testing::World;

class Collectives : public ::testing::TestWithParam<std::tuple<int, Wires>> {};

TEST_P(Collectives, ReduceScatter) {
  const int n = std::get<0>(GetParam());
  const Wires wires = std::get<1>(GetParam());
  World world(n, wires);
  world.run([&](int r, Communicator& comm) {
    for (size_t m : {size_t{0}, size_t{1}, size_t{7}, size_t{300}}) {
      for (DType dt : kWideDTypes) {
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
          auto in = testing::make_input(dt, r, m * static_cast<size_t>(n));
          const auto before = in;
          std::vector<uint8_t> out(m * dtype_size(dt) + 1);
          comm.reduce_scatter(Buffer{dt, in.data(), m * n}, Buffer{dt, out.data(), m}, {.op = op})
              ->wait();
          ASSERT_TRUE(testing::matches_reduction(dt, op, n, out.data(), m, m * r))
              << "rank " << r << " m=" << m;
          ASSERT_EQ(in, before) << "reduce_scatter must not modify its input";
        }
      }
    }
  });
}

TEST_P(Collectives, Allgather) {
  const int n = std::get<0>(GetParam());
  const Wires wires = std::get<1>(GetParam());
  World world(n, wires);
  world.run([&](int r, Communicator& comm) {
    for (size_t m : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}}) {
      for (DType dt : {DType::F16, DType::I64}) {
        auto in = testing::make_input(dt, r, m);
        std::vector<uint8_t> out(m * n * dtype_size(dt) + 1);
        comm.allgather(Buffer{dt, in.data(), m}, Buffer{dt, out.data(), m * n})->wait();
        for (int b = 0; b < n; ++b) {
          for (size_t i = 0; i < m; ++i) {
            ASSERT_EQ(testing::load(dt, out.data(), b * m + i), testing::input_value(b, i))
                << "rank " << r << " block " << b << " element " << i;
          }
        }
      }
    }
  });
}

TEST_P(Collectives, AllgatherInPlace) {
  const int n = std::get<0>(GetParam());
  const Wires wires = std::get<1>(GetParam());
  World world(n, wires);
  world.run([&](int r, Communicator& comm) {
    const size_t m = 333;
    std::vector<int32_t> out(m * n, -1);
    for (size_t i = 0; i < m; ++i) out[r * m + i] = static_cast<int32_t>(r * 1000 + i);
    comm.allgather(Buffer{DType::I32, out.data() + r * m, m}, Buffer{DType::I32, out.data(), m * n})
        ->wait();
    for (int b = 0; b < n; ++b) {
      for (size_t i = 0; i < m; ++i) ASSERT_EQ(out[b * m + i], static_cast<int32_t>(b * 1000 + i));
    }
  });
}

TEST_P(Collectives, BroadcastFromEveryRoot) {
  const int n = std::get<0>(GetParam());
  const Wires wires = std::get<1>(GetParam());
  World world(n, wires);
  world.run([&](int r, Communicator& comm) {
    // 1000 elements go down the binomial tree, 100000 down the pipelined chain.
    for (size_t m : {size_t{0}, size_t{1}, size_t{1000}, size_t{100000}}) {
      for (int root = 0; root < n; ++root) {
        std::vector<double> buf(m + 1, -1.0);
        if (r == root) {
          for (size_t i = 0; i < m; ++i) buf[i] = static_cast<double>(root * 1000000 + i);
        }
        comm.broadcast(Buffer{DType::F64, buf.data(), m}, {.root = root})->wait();
        for (size_t i = 0; i < m; ++i) {
          ASSERT_EQ(buf[i], static_cast<double>(root * 1000000 + i))
              << "rank " << r << " root " << root << " element " << i;
        }
      }
    }
  });
}

TEST_P(Collectives, BarrierWaitsForTheSlowestRank) {
  const int n = std::get<0>(GetParam());
  const Wires wires = std::get<1>(GetParam());
  World world(n, wires);
  std::vector<std::atomic<int>> arrived(static_cast<size_t>(n));
  world.run([&](int r, Communicator& comm) {
    for (int round = 1; round <= 3; ++round) {
      // A different rank is late each round.
      if (r == round % n) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      arrived[static_cast<size_t>(r)] = round;
      comm.barrier()->wait();
      for (int q = 0; q < n; ++q) {
        ASSERT_GE(arrived[static_cast<size_t>(q)].load(), round)
            << "rank " << r << " left barrier " << round << " before rank " << q << " arrived";
      }
      comm.barrier()->wait();  // nobody starts the next round before all have checked
    }
  });
}

TEST_P(Collectives, SendRecvAroundTheRing) {
  const int n = std::get<0>(GetParam());
  const Wires wires = std::get<1>(GetParam());
  if (n == 1) GTEST_SKIP() << "no peer to talk to";
  World world(n, wires);
  world.run([&](int r, Communicator& comm) {
    const int right = (r + 1) % n, left = (r + n - 1) % n;
    for (size_t m : {size_t{0}, size_t{5}, size_t{100000}}) {
      std::vector<int64_t> out(m + 1), in(m + 1, 0);
      for (size_t i = 0; i < m; ++i) out[i] = r * 1000000 + static_cast<int64_t>(i);
      auto s = comm.send(Buffer{DType::I64, out.data(), m}, right, {.tag = 7});
      auto v = comm.recv(Buffer{DType::I64, in.data(), m}, left, {.tag = 7});
      s->wait();
      v->wait();
      for (size_t i = 0; i < m; ++i) ASSERT_EQ(in[i], left * 1000000 + static_cast<int64_t>(i));
    }
  });
}

// As torch.distributed's isend/irecv allow (and Gloo runs): a rank posts its sends and recvs in
// any order before it waits on them. Every rank its recv first; every rank a send first, larger
// than what a connection buffers; and two tags, sent in one order and received in the other, with
// even ranks posting their sends first and odd ranks their recvs.
TEST_P(Collectives, SendsAndRecvsPostedInAnyOrderComplete) {
  const int n = std::get<0>(GetParam());
  const Wires wires = std::get<1>(GetParam());
  if (n == 1) GTEST_SKIP() << "no peer to talk to";
  World world(n, wires);
  world.run([&](int r, Communicator& comm) {
    const int right = (r + 1) % n, left = (r + n - 1) % n;
    auto value = [](int from, uint32_t tag, size_t i) {
      return static_cast<int32_t>(from * 1000 + static_cast<int>(tag) * 100 +
                                  static_cast<int>(i % 97));
    };
    for (size_t m : {size_t{5}, size_t{300001}}) {
      for (bool recv_first : {true, false}) {
        std::vector<int32_t> out(m), in(m, -1);
        for (size_t i = 0; i < m; ++i) out[i] = value(r, 1, i);
        auto post_send = [&] {
          return comm.send(Buffer{DType::I32, out.data(), m}, right, {.tag = 1});
        };
        auto post_recv = [&] {
          return comm.recv(Buffer{DType::I32, in.data(), m}, left, {.tag = 1});
        };
        std::shared_ptr<Work> s, v;
        if (recv_first) {
          v = post_recv();
          s = post_send();
        } else {
          s = post_send();
          v = post_recv();
        }
        // Waited on in the order posted: the first one cannot end before the other has begun.
        (recv_first ? v : s)->wait();
        (recv_first ? s : v)->wait();
        for (size_t i = 0; i < m; ++i) {
          ASSERT_EQ(in[i], value(left, 1, i)) << "rank " << r << " m=" << m << " i=" << i;
        }
      }
      std::vector<int32_t> out1(m), out2(m), in1(m, -1), in2(m, -1);
      for (size_t i = 0; i < m; ++i) {
        out1[i] = value(r, 1, i);
        out2[i] = value(r, 2, i);
      }
      std::vector<std::shared_ptr<Work>> works;
      auto sends = [&] {
        works.push_back(comm.send(Buffer{DType::I32, out1.data(), m}, right, {.tag = 1}));
        works.push_back(comm.send(Buffer{DType::I32, out2.data(), m}, right, {.tag = 2}));
      };
      auto recvs = [&] {
        works.push_back(comm.recv(Buffer{DType::I32, in2.data(), m}, left, {.tag = 2}));
        works.push_back(comm.recv(Buffer{DType::I32, in1.data(), m}, left, {.tag = 1}));
      };
      if (r % 2 == 0) {
        sends();
        recvs();
      } else {
        recvs();
        sends();
      }
      for (auto& w : works) w->wait();
      for (size_t i = 0; i < m; ++i) {
        ASSERT_EQ(in1[i], value(left, 1, i)) << "rank " << r << " tag 1 m=" << m << " i=" << i;
        ASSERT_EQ(in2[i], value(left, 2, i)) << "rank " << r << " tag 2 m=" << m << " i=" << i;
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizesTransports, Collectives,
                         ::testing::Combine(::testing::Values(1, 2, 3, 5, 8),
                                            ::testing::Values(Wires::Tcp, Wires::Shm, Wires::Mixed,
                                                              Wires::Hosts, Wires::Lazy,
                                                              Wires::Hmac, Wires::Gmac)),
                         [](const auto& info) {
                           return "n" + std::to_string(std::get<0>(info.param)) + "_" +
                                  testing::wires_name(std::get<1>(info.param));
                         });

TEST(SendRecv, MatchesByTagNotByArrivalOrder) {
  World world(2);
  world.run([&](int r, Communicator& comm) {
    int32_t a = 0, b = 0, c = 0;
    if (r == 0) {
      int32_t x = 1, y = 2, z = 3;
      comm.send(Buffer{DType::I32, &x, 1}, 1, {.tag = 1});
      comm.send(Buffer{DType::I32, &y, 1}, 1, {.tag = 2});
      comm.send(Buffer{DType::I32, &z, 1}, 1, {.tag = 3})->wait();
    } else {
      comm.recv(Buffer{DType::I32, &c, 1}, 0, {.tag = 3})->wait();
      comm.recv(Buffer{DType::I32, &a, 1}, 0, {.tag = 1})->wait();
      comm.recv(Buffer{DType::I32, &b, 1}, 0, {.tag = 2})->wait();
      EXPECT_EQ(a, 1);
      EXPECT_EQ(b, 2);
      EXPECT_EQ(c, 3);
    }
  });
}

// A send that waits for a slow reader takes on a recv issued before the next collective, never
// one issued after it: run ahead of the collective, it would read the peer's collective's bytes.
TEST(SendRecv, AWaitingSendTakesOnNoRecvFromBehindACollective) {
  World world(2);
  world.run([&](int r, Communicator& comm) {
    std::vector<int32_t> big(4 << 20, 7);  // 16 MiB: more than a connection buffers
    int32_t small = 0;
    if (r == 0) {
      auto s = comm.send(Buffer{DType::I32, big.data(), big.size()}, 1, {.tag = 1});
      auto b = comm.barrier();
      auto v = comm.recv(Buffer{DType::I32, &small, 1}, 1, {.tag = 2});
      s->wait();
      b->wait();
      v->wait();
      EXPECT_EQ(small, 42);
    } else {
      // A slow peer: rank 0's send waits alone long enough to look for a partner.
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::vector<int32_t> in(big.size(), 0);
      comm.recv(Buffer{DType::I32, in.data(), in.size()}, 0, {.tag = 1})->wait();
      comm.barrier()->wait();
      small = 42;
      comm.send(Buffer{DType::I32, &small, 1}, 0, {.tag = 2})->wait();
      EXPECT_EQ(in.back(), 7);
    }
  });
}

TEST(SendRecv, MessageArrivingDuringACollectiveWaitsForItsRecv) {
  World world(2);
  world.run([&](int r, Communicator& comm) {
    std::vector<float> grad(1000, static_cast<float>(r + 1));
    std::vector<int32_t> msg(50, 0);
    if (r == 0) {
      for (size_t i = 0; i < msg.size(); ++i) msg[i] = static_cast<int32_t>(i);
      comm.send(Buffer{DType::I32, msg.data(), msg.size()}, 1, {.tag = 9});
      comm.allreduce(Buffer{DType::F32, grad.data(), grad.size()})->wait();
    } else {
      comm.allreduce(Buffer{DType::F32, grad.data(), grad.size()})->wait();
      comm.recv(Buffer{DType::I32, msg.data(), msg.size()}, 0, {.tag = 9})->wait();
      for (size_t i = 0; i < msg.size(); ++i) ASSERT_EQ(msg[i], static_cast<int32_t>(i));
    }
    for (float g : grad) ASSERT_EQ(g, 3.0f);
  });
}

// Messages that arrive before their recv are kept within CommConfig::p2p_stash_bytes per peer:
// up to the limit they wait for their recvs; the one that would pass it fails the receiving
// operation, naming the sender, the tag and the limit, instead of growing the stash without end.
TEST(SendRecv, MessagesWaitingForTheirRecvAreBoundedPerPeer) {
  World world(2, [](CommConfig& c) { c.p2p_stash_bytes = 4000; });
  std::string error;
  world.run([&](int r, Communicator& comm) {
    std::vector<int32_t> msg(500, r);  // 2000 bytes
    if (r == 0) {
      try {
        for (uint32_t tag : {1u, 2u, 3u, 4u}) {
          comm.send(Buffer{DType::I32, msg.data(), msg.size()}, 1, {.tag = tag})->wait();
        }
      } catch (const Error& e) {
        // Rank 1 fails at tag 3 and closes its connections: a send that comes later fails too,
        // saying why.
        EXPECT_NE(std::string(e.what()).find("rank 1 closed its connections after a failure"),
                  std::string::npos)
            << e.what();
      }
      return;
    }
    try {
      // Tags 1 and 2 fill the stash exactly; tag 3 would pass it.
      comm.recv(Buffer{DType::I32, msg.data(), msg.size()}, 0, {.tag = 4})->wait();
    } catch (const ProtocolError& e) {
      error = e.what();
    }
  });
  EXPECT_NE(error.find("rank 0 sent a message of 2000 bytes (tag 3) before its recv was issued"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("4000 bytes of its messages already waiting"), std::string::npos) << error;
  EXPECT_NE(error.find("limit of 4000"), std::string::npos) << error;
}

// The bound is on what waits, not on a message: one far larger than it goes straight into the
// recv posted for it.
TEST(SendRecv, AMessageLargerThanTheStashGoesStraightToItsRecv) {
  World world(2, [](CommConfig& c) { c.p2p_stash_bytes = 4000; });
  world.run([&](int r, Communicator& comm) {
    std::vector<int64_t> msg(1 << 17);  // 1 MiB
    if (r == 0) {
      for (size_t i = 0; i < msg.size(); ++i) msg[i] = static_cast<int64_t>(i);
      comm.send(Buffer{DType::I64, msg.data(), msg.size()}, 1, {.tag = 5})->wait();
    } else {
      comm.recv(Buffer{DType::I64, msg.data(), msg.size()}, 0, {.tag = 5})->wait();
      for (size_t i = 0; i < msg.size(); ++i) ASSERT_EQ(msg[i], static_cast<int64_t>(i));
    }
  });
}

TEST(Collectives, SizeMismatchesAreRejectedAtTheCall) {
  World world(2);
  std::vector<float> a(10), b(10);
  EXPECT_THROW(
      world[0].allgather(Buffer{DType::F32, a.data(), 10}, Buffer{DType::F32, b.data(), 10}),
      ConfigError);
  EXPECT_THROW(
      world[0].reduce_scatter(Buffer{DType::F32, a.data(), 10}, Buffer{DType::F32, b.data(), 4}),
      ConfigError);
  EXPECT_THROW(world[0].broadcast(Buffer{DType::F32, a.data(), 10}, {.root = 2}), ConfigError);
  EXPECT_THROW(world[0].send(Buffer{DType::F32, a.data(), 10}, 0), ConfigError);
  EXPECT_THROW(world[0].allreduce(Buffer{DType::F32, nullptr, 10}), ConfigError);
}

}  // namespace
}  // namespace cohort::comm
