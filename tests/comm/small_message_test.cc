// The small-message path: recursive doubling's results are the same bytes on every rank, and an
// operation run by the thread that waits for it keeps the order, sequence numbers and failure
// behaviour of one run by the communication thread.
#include <gtest/gtest.h>
#include <sched.h>
#include <time.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "cohort/comm/algorithms.h"
#include "cohort/comm/communicator.h"
#include "data.h"
#include "world.h"

namespace cohort::comm {
namespace {

using std::chrono::milliseconds;
using testing::World;

// Floats whose sums round (a different rounding in each order of summation), signed zeros and
// repeated values, so that Max and Min of +0 and -0 depend on the operand order too.
std::vector<uint8_t> rounding_input(DType dt, int rank, size_t count) {
  std::mt19937 gen(static_cast<uint32_t>(1234 + rank));
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<uint8_t> v(count * dtype_size(dt) + 1);
  for (size_t i = 0; i < count; ++i) {
    double x = u(gen) * std::pow(10.0, static_cast<int>(i % 7) - 3);
    if (i % 11 == 0) x = rank % 2 ? -0.0 : 0.0;
    testing::store(dt, v.data(), i, x);
  }
  return v;
}

// The float64 sum of element i over n ranks, and the sum of magnitudes that bounds its rounding.
std::pair<double, double> reference_sum(DType dt, int n, size_t count, size_t i) {
  double s = 0, m = 0;
  for (int r = 0; r < n; ++r) {
    double x = testing::load(dt, rounding_input(dt, r, count).data(), i);
    s += x;
    m += std::fabs(x);
  }
  return {s, m};
}

class RecursiveDoubling : public ::testing::TestWithParam<std::tuple<int, size_t>> {};

TEST_P(RecursiveDoubling, EveryRankHoldsTheSameBytes) {
  const auto [n, chunk] = GetParam();
  const size_t count = 1001;  // several segments of `chunk` bytes, and an odd tail
  World world(n, [&, chunk = chunk](CommConfig& c) { c.chunk_bytes = chunk; });
  const DType dtypes[] = {DType::F32, DType::F64, DType::F16, DType::BF16};
  const ReduceOp ops[] = {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min};
  // results[rank][case]
  std::vector<std::vector<std::vector<uint8_t>>> results(static_cast<size_t>(n));
  world.run([&](int r, Communicator& comm) {
    for (DType dt : dtypes) {
      for (ReduceOp op : ops) {
        // A per-rank offset into the buffer: the kernels see different alignments on each rank.
        const size_t es = dtype_size(dt), shift = static_cast<size_t>(r % 4);
        auto in = rounding_input(dt, r, count);
        std::vector<uint8_t> buf((count + 4) * es);
        std::memcpy(buf.data() + shift * es, in.data(), count * es);
        comm.allreduce(Buffer{dt, buf.data() + shift * es, count},
                       {.op = op, .algorithm = Algorithm::RecursiveDoubling})
            ->wait();
        results[static_cast<size_t>(r)].emplace_back(
            buf.begin() + static_cast<long>(shift * es),
            buf.begin() + static_cast<long>((shift + count) * es));
      }
    }
  });
  size_t c = 0;
  for (DType dt : dtypes) {
    for (ReduceOp op : ops) {
      const auto& want = results[0][c];
      for (int r = 1; r < n; ++r) {
        EXPECT_EQ(std::memcmp(results[static_cast<size_t>(r)][c].data(), want.data(), want.size()),
                  0)
            << dtype_name(dt) << " " << reduce_op_name(op) << ": rank " << r
            << " differs from rank 0";
      }
      if (op == ReduceOp::Sum) {
        for (size_t i = 0; i < count; i += 97) {
          const auto [ref, mag] = reference_sum(dt, n, count, i);
          // Each of the log2(n) + 1 roundings is within half an ulp of its partial sum.
          const double eps = dt == DType::F64 ? 1e-15 : dt == DType::F32 ? 1e-7 : 1e-2;
          const double tol = 4 * eps * mag + 1e-30;
          EXPECT_NEAR(testing::load(dt, want.data(), i), ref, tol)
              << dtype_name(dt) << " element " << i;
        }
      }
      ++c;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, RecursiveDoubling,
                         ::testing::Combine(::testing::Values(2, 3, 4, 5, 6, 8),
                                            ::testing::Values(size_t{64}, size_t{256} << 10)),
                         [](const auto& info) {
                           return "n" + std::to_string(std::get<0>(info.param)) + "_chunk" +
                                  std::to_string(std::get<1>(info.param));
                         });

// Both partners of a step send a segment far larger than what their pair buffers (a 64 KiB ring,
// or 64 KiB socket buffers) at the same time: each must keep reading while its own send waits.
TEST(RecursiveDoubling, SegmentsLargerThanThePairBuffersDoNotStallEitherPartner) {
  for (testing::Wires w : {testing::Wires::Shm, testing::Wires::Tcp}) {
    World world(2, w, [](CommConfig& c) {
      c.chunk_bytes = 4 << 20;
      c.shm_ring_bytes = 64 << 10;
      c.socket_buffer_bytes = 64 << 10;
      c.timeout = std::chrono::seconds(20);
    });
    world.run([&](int r, Communicator& comm) {
      const size_t count = 2 << 20;
      auto in = testing::make_input(DType::F32, r, count);
      comm.allreduce(Buffer{DType::F32, in.data(), count},
                     {.algorithm = Algorithm::RecursiveDoubling})
          ->wait();
      EXPECT_TRUE(testing::matches_reduction(DType::F32, ReduceOp::Sum, 2, in.data(), count))
          << testing::wires_name(w) << " rank " << r;
    });
  }
}

TEST(RecursiveDoubling, ParsesItsName) {
  EXPECT_EQ(parse_algorithm("recursive_doubling"), Algorithm::RecursiveDoubling);
  EXPECT_EQ(algorithm_name(Algorithm::RecursiveDoubling), "recursive_doubling");
}

TEST(WaitingThread, WaitingOnTheLastOfManyRunsThemAllInIssueOrder) {
  const int n = 3;
  const size_t count = 100;
  World world(n);
  world.run([&](int r, Communicator& comm) {
    std::vector<std::vector<uint8_t>> bufs;
    std::vector<std::shared_ptr<Work>> works;
    for (int k = 0; k < 20; ++k) bufs.push_back(testing::make_input(DType::I32, r + k, count));
    for (int k = 0; k < 20; ++k) {
      works.push_back(comm.allreduce(
          Buffer{DType::I32, bufs[static_cast<size_t>(k)].data(), count},
          {.algorithm = k % 2 ? Algorithm::RecursiveDoubling : Algorithm::HalvingDoubling}));
    }
    works.back()->wait();
    for (int k = 0; k < 20; ++k) {
      EXPECT_TRUE(works[static_cast<size_t>(k)]->is_completed()) << "allreduce " << k;
      EXPECT_EQ(works[static_cast<size_t>(k)]->sequence(), static_cast<uint64_t>(k + 1));
      // Every rank used input rank r + k: the reduction is that of ranks k .. k + n - 1.
      for (size_t i = 0; i < count; ++i) {
        double want = 0;
        for (int q = 0; q < n; ++q) want += testing::input_value(q + k, i);
        ASSERT_EQ(testing::load(DType::I32, bufs[static_cast<size_t>(k)].data(), i), want)
            << "allreduce " << k << " element " << i;
      }
    }
    EXPECT_EQ(comm.stats().collectives, 20u);
  });
}

TEST(WaitingThread, AnOperationNobodyWaitsForStillCompletes) {
  World world(2);
  world.run([&](int r, Communicator& comm) {
    std::vector<float> buf(16, static_cast<float>(r + 1));
    auto w = comm.allreduce(Buffer{DType::F32, buf.data(), buf.size()}, {});
    // Only the communication thread can run it here.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!w->is_completed() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(milliseconds(1));
    }
    ASSERT_TRUE(w->is_completed());
    EXPECT_EQ(buf[0], 3.0f);
  });
}

// Records the thread that ran each collective (the observer runs on it).
class ThreadObserver final : public CollectiveObserver {
 public:
  void on_collective(const CollectiveRecord& r) override {
    std::lock_guard lk(mu_);
    threads_[r.seq] = std::this_thread::get_id();
  }
  std::thread::id thread_of(uint64_t seq) {
    std::lock_guard lk(mu_);
    return threads_[seq];
  }

 private:
  std::mutex mu_;
  std::map<uint64_t, std::thread::id> threads_;
};

TEST(WaitingThread, AfterManyOperationsWaitedOnAtOnceOneNobodyWaitsForStillStartsSoon) {
  // Operations waited on at once let the hand-off delay grow to its longest; one nobody waits
  // for is then taken by the communication thread within that, and the next one within the
  // shortest delay again.
  World world(2, [](CommConfig& c) {
    c.hand_off_delay = std::chrono::microseconds(500);
    c.hand_off_delay_max = milliseconds(40);
  });
  world.run([&](int r, Communicator& comm) {
    std::vector<float> buf(16, 0.0f);
    for (int k = 0; k < 300; ++k) {
      buf[0] = static_cast<float>(r + 1);
      comm.allreduce(Buffer{DType::F32, buf.data(), buf.size()}, {})->wait();
      ASSERT_EQ(buf[0], 3.0f);
    }
    for (int k = 0; k < 2; ++k) {
      buf[0] = static_cast<float>(r + 1);
      auto w = comm.allreduce(Buffer{DType::F32, buf.data(), buf.size()}, {});
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (!w->is_completed() && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(milliseconds(1));
      }
      ASSERT_TRUE(w->is_completed()) << "unwaited allreduce " << k;
      EXPECT_EQ(buf[0], 3.0f);
    }
  });
}

TEST(WaitingThread, ASmallOperationIsRunByTheThreadThatWaitsForIt) {
  // A delay long enough that the communication thread never takes the operation first.
  World world(2, [](CommConfig& c) { c.hand_off_delay = std::chrono::seconds(10); });
  std::vector<ThreadObserver> observers(2);
  world.run([&](int r, Communicator& comm) {
    comm.flight_recorder().set_observer(&observers[static_cast<size_t>(r)]);
    std::vector<float> buf(16, static_cast<float>(r + 1));
    auto w = comm.allreduce(Buffer{DType::F32, buf.data(), buf.size()}, {});
    // Time in which a communication thread that took operations at once would take this one.
    std::this_thread::sleep_for(milliseconds(20));
    const auto t0 = std::chrono::steady_clock::now();
    w->wait();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
    EXPECT_EQ(buf[0], 3.0f);
    EXPECT_EQ(observers[static_cast<size_t>(r)].thread_of(w->sequence()),
              std::this_thread::get_id());
    comm.flight_recorder().set_observer(nullptr);
  });
}

TEST(WaitingThread, ALargeOperationDoesNotWaitBehindASmallOneNobodyWaitsFor) {
  World world(2, [](CommConfig& c) {
    c.hand_off_delay = std::chrono::seconds(20);
    c.hand_off_bytes = 1024;
  });
  world.run([&](int r, Communicator& comm) {
    std::vector<float> small(16, static_cast<float>(r + 1));
    std::vector<float> large(4096, static_cast<float>(r + 1));
    auto ws = comm.allreduce(Buffer{DType::F32, small.data(), small.size()}, {});
    auto wl = comm.allreduce(Buffer{DType::F32, large.data(), large.size()}, {});
    // Nobody waits: the communication thread runs both, the small one first, without waiting
    // for the small one's hand-off time.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!wl->is_completed() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(milliseconds(1));
    }
    ASSERT_TRUE(wl->is_completed());
    EXPECT_TRUE(ws->is_completed());
    EXPECT_EQ(small[0], 3.0f);
    EXPECT_EQ(large[4095], 3.0f);
  });
}

TEST(WaitingThread, APromptOperationIsStartedWithoutAnyoneWaiting) {
  // A hand-off delay no test waits out: only `prompt` can have the communication thread take
  // this small allreduce in time.
  World world(2, [](CommConfig& c) {
    c.hand_off_delay = std::chrono::seconds(60);
    c.hand_off_delay_max = std::chrono::seconds(60);
  });
  world.run([&](int r, Communicator& comm) {
    std::vector<float> buf(16, static_cast<float>(r + 1));
    auto w = comm.allreduce(Buffer{DType::F32, buf.data(), buf.size()}, {.prompt = true});
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!w->is_completed() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(milliseconds(1));
    }
    ASSERT_TRUE(w->is_completed());
    EXPECT_EQ(buf[0], 3.0f);
  });
}

// Work::then's promise: a collective's callback ends before the next collective starts, so a
// chain of collectives may compute each one's input from the one before without the caller
// waiting (PowerSGD's Q from its averaged P). Both ways of running them: the communication
// thread (prompt, nobody waits) and the thread that waits on the last one.
TEST(WaitingThread, ACollectiveRunsOnWhatThePreviousOnesCallbackWrote) {
  for (const bool prompt : {true, false}) {
    World world(3, [](CommConfig& c) { c.hand_off_delay = std::chrono::seconds(60); });
    world.run([&](int r, Communicator& comm) {
      const size_t n = 4096;
      for (int round = 0; round < 20; ++round) {
        std::vector<float> first(n, static_cast<float>(r + 1)), second(n, -1.0f);
        auto a = comm.allreduce(Buffer{DType::F32, first.data(), n}, {.prompt = prompt});
        a->then([&](std::exception_ptr e) {
          if (e) return;
          // Several passes, each writing the whole buffer, so that a collective started early
          // reads a half-written one.
          for (int pass = 0; pass < 50; ++pass) {
            for (size_t i = 0; i < n; ++i) second[i] = first[i] * static_cast<float>(pass + 1) / 50;
          }
        });
        auto b = comm.allreduce(Buffer{DType::F32, second.data(), n}, {.prompt = prompt});
        b->wait();
        // first: 1 + 2 + 3 on every rank; second: that, from each of the three ranks.
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(second[i], 18.0f) << "prompt " << prompt << " round " << round << " element " << i;
        }
      }
    });
  }
}

TEST(WaitingThread, ShortWaitTimesOutInsteadOfRunningUntilTheOperationsDeadline) {
  // Rank 1 never joins. A 100 ms wait on rank 0 must not run the 20 s collective itself.
  World world(2, [](CommConfig& c) { c.timeout = std::chrono::seconds(20); });
  std::vector<float> buf(16, 1.0f);
  auto w = world[0].allreduce(Buffer{DType::F32, buf.data(), buf.size()}, {});
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(w->wait(milliseconds(100)), TimeoutError);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  world[0].abort("test over");
  EXPECT_THROW(w->wait(), AbortedError);
}

TEST(WaitingThread, FailureOnTheWaitingThreadFailsTheCommunicator) {
  World world(2, [](CommConfig& c) { c.timeout = milliseconds(300); });
  std::vector<float> buf(16, 1.0f);
  auto w = world[0].allreduce(Buffer{DType::F32, buf.data(), buf.size()}, {});
  EXPECT_THROW(w->wait(), CollectiveTimeoutError);  // rank 1 never joined
  auto later = world[0].allreduce(Buffer{DType::F32, buf.data(), buf.size()}, {});
  EXPECT_THROW(later->wait(), CollectiveTimeoutError);
  EXPECT_EQ(later->sequence(), 2u);
}

// CPU time on `clock`: CLOCK_THREAD_CPUTIME_ID (the calling thread), CLOCK_PROCESS_CPUTIME_ID.
std::chrono::nanoseconds cpu_time(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

// A small operation polls its sockets for up to spin_wait before it sleeps, but only when every
// rank on this host has a CPU: rank 0 waits 200 ms for ranks that join late, and spends that
// time on its CPU (spinning) or asleep. 40 ms of CPU time leaves room for a busy machine.
TEST(Spin, ASmallOperationSpinsOnlyWhenEveryRankOnThisHostHasACpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  const int cpus = CPU_COUNT(&set);
  std::vector<int> worlds = {2};
  if (cpus + 1 <= 8) worlds.push_back(cpus + 1);
  for (int n : worlds) {
    World world(n, [](CommConfig& c) {
      c.spin_wait = milliseconds(1000);
      c.hand_off_delay = std::chrono::seconds(10);  // the waiting thread runs it
    });
    std::chrono::nanoseconds cpu{0};
    world.run([&](int r, Communicator& comm) {
      std::vector<float> buf(16, 1.0f);
      if (r != 0) std::this_thread::sleep_for(milliseconds(200));
      auto w = comm.allreduce(Buffer{DType::F32, buf.data(), buf.size()}, {});
      const auto c0 = cpu_time(CLOCK_THREAD_CPUTIME_ID);
      w->wait();
      if (r == 0) cpu = cpu_time(CLOCK_THREAD_CPUTIME_ID) - c0;
      EXPECT_EQ(buf[0], static_cast<float>(n));
    });
    if (n <= cpus) {
      EXPECT_GT(cpu, milliseconds(40)) << n << " ranks on " << cpus << " CPUs: did not spin";
    } else {
      EXPECT_LT(cpu, milliseconds(40)) << n << " ranks on " << cpus << " CPUs: spun";
    }
  }
}

// A large operation waiting on shared memory polls its pairs, yielding between polls, for up to
// yield_wait before it sleeps (its peer may take longer than spin_wait to write the next
// segment); waiting on TCP it sleeps at once. Rank 1 joins 200 ms late: the process spends that
// time on a CPU (polling) or asleep.
TEST(Spin, ALargeOperationPollsSharedMemoryForYieldWaitAndSleepsOnTcp) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  if (CPU_COUNT(&set) < 2) GTEST_SKIP() << "needs a CPU for each of 2 ranks";
  for (Transport t : {Transport::Shm, Transport::Tcp}) {
    World world(2, [&](CommConfig& c) {
      c.transport = t;
      c.yield_wait = std::chrono::seconds(5);
      c.chunk_bytes = 256 << 10;  // the exchange itself costs next to no CPU
    });
    std::chrono::nanoseconds cpu{0};
    world.run([&](int r, Communicator& comm) {
      std::vector<float> buf(256 << 10, 1.0f);  // 1 MiB: above hand_off_bytes
      const auto c0 = cpu_time(CLOCK_PROCESS_CPUTIME_ID);
      if (r != 0) std::this_thread::sleep_for(milliseconds(200));
      comm.allreduce(Buffer{DType::F32, buf.data(), buf.size()}, {})->wait();
      if (r == 0) cpu = cpu_time(CLOCK_PROCESS_CPUTIME_ID) - c0;
      EXPECT_EQ(buf[0], 2.0f);
    });
    if (t == Transport::Shm) {
      EXPECT_GT(cpu, milliseconds(40)) << "shared memory: slept instead of polling";
    } else {
      EXPECT_LT(cpu, milliseconds(40)) << "TCP: polled instead of sleeping";
    }
  }
}

// Spinning ends at the operation's deadline, however long spin_wait is.
TEST(Spin, SpinningDoesNotOverrunTheDeadline) {
  World world(2, [](CommConfig& c) {
    c.spin_wait = std::chrono::seconds(30);
    c.timeout = milliseconds(300);
  });
  std::vector<float> buf(16, 1.0f);
  auto w = world[0].allreduce(Buffer{DType::F32, buf.data(), buf.size()}, {});
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(w->wait(), CollectiveTimeoutError);  // rank 1 never joins
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

TEST(WaitingThread, WorkOutlivesItsCommunicator) {
  std::vector<std::shared_ptr<Work>> works(2);
  {
    World world(2);
    world.run([&](int r, Communicator& comm) {
      std::vector<float> buf(4, 1.0f);
      works[static_cast<size_t>(r)] = comm.barrier({});
      works[static_cast<size_t>(r)]->wait();
    });
  }
  for (auto& w : works) {
    EXPECT_NO_THROW(w->wait());
    EXPECT_NO_THROW(w->wait(milliseconds(10)));
  }
}

}  // namespace
}  // namespace cohort::comm
