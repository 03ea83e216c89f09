// reduce, gather, scatter and all_to_all on real worlds, and allreduce with every element type
// and every reduction that applies to it (product, bitwise, one-byte integers, bool).
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "cohort/base/error.h"
#include "data.h"
#include "world.h"

namespace cohort::comm {
namespace {

using testing::Wires;
using testing::World;

constexpr ReduceOp kEveryOp[] = {ReduceOp::Sum,     ReduceOp::Avg,  ReduceOp::Max, ReduceOp::Min,
                                 ReduceOp::Product, ReduceOp::BAnd, ReduceOp::BOr, ReduceOp::BXor};

bool applies(DType dt, ReduceOp op) {
  if (op == ReduceOp::Avg && dt == DType::Bool) return false;
  const bool bitwise = op == ReduceOp::BAnd || op == ReduceOp::BOr || op == ReduceOp::BXor;
  return !(bitwise && dtype_is_float(dt));
}

class Rooted : public ::testing::TestWithParam<std::tuple<int, Wires>> {};

TEST_P(Rooted, AllreduceOfEveryTypeWithEveryReduction) {
  const int n = std::get<0>(GetParam());
  const Wires wires = std::get<1>(GetParam());
  World world(n, wires);
  world.run([&](int r, Communicator& comm) {
    for (size_t m : {size_t{1}, size_t{7}, size_t{1000}}) {
      for (DType dt : kAllDTypes) {
        for (ReduceOp op : kEveryOp) {
          auto buf = testing::make_input(dt, r, m, 0, op);
          if (!applies(dt, op)) {
            EXPECT_THROW(comm.allreduce(Buffer{dt, buf.data(), m}, {.op = op}), ConfigError);
            continue;
          }
          comm.allreduce(Buffer{dt, buf.data(), m}, {.op = op})->wait();
          ASSERT_TRUE(testing::matches_reduction(dt, op, n, buf.data(), m))
              << "rank " << r << " " << reduce_op_name(op);
        }
      }
    }
  });
}

TEST_P(Rooted, ReduceToEveryRootLeavesTheOthersUnchanged) {
  const int n = std::get<0>(GetParam());
  const Wires wires = std::get<1>(GetParam());
  World world(n, wires);
  world.run([&](int r, Communicator& comm) {
    for (int root = 0; root < n; ++root) {
      for (size_t m : {size_t{0}, size_t{1}, size_t{5}, size_t{1000}, size_t{70001}}) {
        for (DType dt : kAllDTypes) {
          for (ReduceOp op : kEveryOp) {
            if (!applies(dt, op) || (m > 1000 && dt != DType::F32)) continue;
            auto buf = testing::make_input(dt, r, m, 0, op);
            const auto before = buf;
            comm.reduce(Buffer{dt, buf.data(), m}, {.op = op, .root = root})->wait();
            if (r == root) {
              ASSERT_TRUE(testing::matches_reduction(dt, op, n, buf.data(), m))
                  << "root " << root << " " << reduce_op_name(op) << " m=" << m;
            } else {
              ASSERT_EQ(buf, before) << "rank " << r << " is not the root " << root;
            }
          }
        }
      }
    }
  });
}

TEST_P(Rooted, GatherAndScatterAtEveryRoot) {
  const int n = std::get<0>(GetParam());
  const Wires wires = std::get<1>(GetParam());
  World world(n, wires);
  world.run([&](int r, Communicator& comm) {
    for (int root = 0; root < n; ++root) {
      for (size_t m : {size_t{0}, size_t{1}, size_t{7}, size_t{100000}}) {
        for (DType dt : {DType::F32, DType::I64, DType::U8}) {
          const size_t es = dtype_size(dt), all = m * static_cast<size_t>(n);
          auto in = testing::make_input(dt, r, m, 0);
          std::vector<uint8_t> out(r == root ? all * es + 1 : 1);
          comm.gather(Buffer{dt, in.data(), m}, Buffer{dt, out.data(), r == root ? all : 0},
                      {.root = root})
              ->wait();
          if (r == root) {
            for (int b = 0; b < n; ++b) {
              const auto theirs = testing::make_input(dt, b, m);
              ASSERT_EQ(0, std::memcmp(out.data() + static_cast<size_t>(b) * m * es, theirs.data(),
                                       m * es))
                  << "gather to " << root << ": block " << b;
            }
          }
          // Scatter: the root hands out blocks that are (rank b's input, offset by b * m).
          std::vector<uint8_t> whole =
              r == root ? testing::make_input(dt, 99, all) : std::vector<uint8_t>(1);
          std::vector<uint8_t> mine(m * es + 1);
          comm.scatter(Buffer{dt, whole.data(), r == root ? all : 0}, Buffer{dt, mine.data(), m},
                       {.root = root})
              ->wait();
          const auto want = testing::make_input(dt, 99, m, static_cast<size_t>(r) * m);
          ASSERT_EQ(mine, want) << "scatter from " << root << " to rank " << r;
        }
      }
    }
  });
}

TEST_P(Rooted, AllToAllWithEqualAndUnequalBlocks) {
  const int n = std::get<0>(GetParam());
  const Wires wires = std::get<1>(GetParam());
  World world(n, wires);
  world.run([&](int r, Communicator& comm) {
    // Element j of the block rank a sends rank b is a * 1000000 + b * 1000 + j.
    auto value = [](int a, int b, size_t j) { return double(a * 1000000 + b * 1000) + double(j); };
    for (bool equal : {true, false}) {
      // Unequal: rank a sends rank b (a + 2 * b) % 5 elements (some blocks empty).
      auto count = [&](int a, int b) -> size_t { return equal ? 300 : size_t((a + 2 * b) % 5); };
      std::vector<size_t> send(static_cast<size_t>(n)), recv(static_cast<size_t>(n));
      for (int b = 0; b < n; ++b) {
        send[static_cast<size_t>(b)] = count(r, b);
        recv[static_cast<size_t>(b)] = count(b, r);
      }
      const size_t total_in = std::accumulate(send.begin(), send.end(), size_t{0});
      const size_t total_out = std::accumulate(recv.begin(), recv.end(), size_t{0});
      std::vector<double> in(total_in + 1), out(total_out + 1, -1);
      size_t k = 0;
      for (int b = 0; b < n; ++b) {
        for (size_t j = 0; j < count(r, b); ++j) in[k++] = value(r, b, j);
      }
      AllToAllOptions opts;
      if (!equal) {
        opts.send_counts = send;
        opts.recv_counts = recv;
      }
      comm.all_to_all(Buffer{DType::F64, in.data(), total_in},
                      Buffer{DType::F64, out.data(), total_out}, opts)
          ->wait();
      k = 0;
      for (int a = 0; a < n; ++a) {
        for (size_t j = 0; j < count(a, r); ++j, ++k) {
          ASSERT_EQ(out[k], value(a, r, j)) << "rank " << r << " from " << a << " element " << j;
        }
      }
    }
  });
}

TEST(RootedErrors, BadArgumentsFailOnTheCallersThread) {
  World world(2, Wires::Tcp);
  world.run([&](int r, Communicator& comm) {
    float f[4] = {};
    EXPECT_THROW(comm.allreduce(Buffer{DType::F32, f, 4}, {.op = ReduceOp::BXor}), ConfigError);
    EXPECT_THROW(comm.reduce(Buffer{DType::F32, f, 4}, {.root = 2}), ConfigError);
    if (r == 0) {
      EXPECT_THROW(comm.gather(Buffer{DType::F32, f, 2}, Buffer{DType::F32, f, 3}), ConfigError);
    }
    EXPECT_THROW(comm.all_to_all(Buffer{DType::F32, f, 3}, Buffer{DType::F32, f, 3}), ConfigError);
    EXPECT_THROW(comm.all_to_all(Buffer{DType::F32, f, 4}, Buffer{DType::F32, f, 4},
                                 {.send_counts = {1, 2}, .recv_counts = {2, 2}}),
                 ConfigError);
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizesTransports, Rooted,
                         ::testing::Combine(::testing::Values(1, 2, 3, 5),
                                            ::testing::Values(Wires::Tcp, Wires::Shm, Wires::Lazy,
                                                              Wires::Hmac, Wires::Gmac)),
                         [](const auto& info) {
                           return "n" + std::to_string(std::get<0>(info.param)) + "_" +
                                  testing::wires_name(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace cohort::comm
