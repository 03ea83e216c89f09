// Which transport a communicator gives each pair of ranks, and what it does where shared memory
// cannot be had.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>

#include "cohort/comm/mesh_pairs.h"
#include "cohort/comm/transport/shm_pair.h"
#include "data.h"
#include "world.h"

namespace cohort::comm {
namespace {

using testing::Wires;
using testing::World;

TEST(SharedMemory, RanksOfOneHostTalkOverItUnlessTold) {
  for (Wires w : {Wires::Tcp, Wires::Shm, Wires::Mixed, Wires::Hosts}) {
    World world(4, w);
    for (int r = 0; r < 4; ++r) {
      const CommStats s = world[r].stats();
      EXPECT_EQ(s.shm_pairs + s.tcp_pairs, 3) << testing::wires_name(w) << " rank " << r;
      // Mixed: odd ranks refuse shared memory, so only the pair (0, 2) has it. Hosts: each rank
      // has one peer on its host (0 and 2, 1 and 3).
      const int want = w == Wires::Tcp     ? 0
                       : w == Wires::Shm   ? 3
                       : w == Wires::Hosts ? 1
                                           : (r % 2 ? 0 : 1);
      EXPECT_EQ(s.shm_pairs, want) << testing::wires_name(w) << " rank " << r;
    }
  }
}

TEST(SharedMemory, NothingOfTheWorldStaysInDevShm) {
  auto mine = [] {
    int n = 0;
    const std::string prefix =
        "cohort-" + std::to_string(::getppid()) + "." + std::to_string(::getpid()) + "-";
    for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
      n += e.path().filename().string().rfind(prefix, 0) == 0;
    }
    return n;
  };
  World world(3, Wires::Shm);
  EXPECT_EQ(mine(), 0);
  std::vector<float> x(1000, 1.0f);
  world.run([&](int, Communicator& c) {
    std::vector<float> y = x;
    c.allreduce(Buffer{DType::F32, y.data(), y.size()})->wait();
    EXPECT_EQ(y[999], 3.0f);
  });
  EXPECT_EQ(mine(), 0);
}

// A rank killed between creating a segment and its peer opening it leaves the name; its launcher
// removes what its children left (and nothing of another launcher's) once they are gone.
TEST(SharedMemory, ALauncherRemovesTheSegmentsItsKilledRanksLeft) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Dies with the segment made and no destructor run, as under SIGKILL.
    auto segment = transport::ShmSegment::create(4096, "orphan");
    ::_exit(segment.name().empty() ? 1 : 0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const std::string left = "cohort-" + std::to_string(::getpid()) + "." + std::to_string(child);
  // Another launcher's, whose pid begins with this one's digits.
  const std::string other = "/cohort-" + std::to_string(::getpid()) + "0.1-other";
  const int fd = ::shm_open(other.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  ::close(fd);
  auto count = [&] {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
      n += e.path().filename().string().rfind(left, 0) == 0;
    }
    return n;
  };
  EXPECT_EQ(count(), 1);
  EXPECT_EQ(transport::ShmSegment::remove_orphans_of(::getpid()), 1);
  EXPECT_EQ(count(), 0);
  EXPECT_TRUE(std::filesystem::exists("/dev/shm" + other));
  ::shm_unlink(other.c_str());
}

// Reductions that read what arrives straight out of the ring (CommConfig::shm_fold_bytes) get
// the same results wherever the ring's stream stands: elements aligned or not (a reduction of 3
// bytes leaves every later frame's payload at an odd offset, read through scratch), frames that
// wrap around the smallest ring many times, every allreduce algorithm, reduce-scatter and the
// rooted reduce, one communicator for all of it.
TEST(SharedMemory, ReductionsReadTheRingInPlaceWhereverItsStreamStands) {
  for (int n : {2, 3, 4}) {
    World world(n, Wires::Shm, [](CommConfig& c) {
      c.shm_ring_bytes = 64 << 10;  // the smallest ring
      c.chunk_bytes = 24 << 10;     // segments that do not divide the ring
    });
    world.run([&](int r, Communicator& c) {
      auto check = [&](DType dt, size_t count, Algorithm algo, const char* what) {
        std::vector<uint8_t> buf = testing::make_input(dt, r, count);
        c.allreduce(Buffer{dt, buf.data(), count}, {.op = ReduceOp::Sum, .algorithm = algo})
            ->wait();
        EXPECT_TRUE(testing::matches_reduction(dt, ReduceOp::Sum, n, buf.data(), count))
            << what << ", rank " << r << " of " << n;
      };
      for (Algorithm algo :
           {Algorithm::Ring, Algorithm::HalvingDoubling, Algorithm::RecursiveDoubling}) {
        check(DType::F32, 100003, algo, "f32 aligned");
        check(DType::I8, 3, algo, "3 bytes");
        check(DType::F32, 100003, algo, "f32 after 3 bytes");
        check(DType::F16, 50001, algo, "f16");
        check(DType::F64, 30001, algo, "f64");
      }
      const size_t m = 40001;
      std::vector<uint8_t> in = testing::make_input(DType::F32, r, m * n), out(m * 4);
      c.reduce_scatter(Buffer{DType::F32, in.data(), m * n}, Buffer{DType::F32, out.data(), m})
          ->wait();
      EXPECT_TRUE(testing::matches_reduction(DType::F32, ReduceOp::Sum, n, out.data(), m, m * r));
      std::vector<uint8_t> buf = testing::make_input(DType::F32, r, 70001);
      c.reduce(Buffer{DType::F32, buf.data(), 70001}, {.op = ReduceOp::Sum, .root = n - 1})->wait();
      if (r == n - 1) {
        EXPECT_TRUE(testing::matches_reduction(DType::F32, ReduceOp::Sum, n, buf.data(), 70001));
      }
    });
  }
}

TEST(SharedMemory, RingsShrinkOnAHostOfManyRanks) {
  CommConfig o;  // 1 MiB rings at most, 256 MiB per host
  EXPECT_EQ(shm_ring_bytes_for(o, 2), size_t{1} << 20);
  EXPECT_EQ(shm_ring_bytes_for(o, 16), size_t{1} << 20);  // 240 rings of 1 MiB
  EXPECT_EQ(shm_ring_bytes_for(o, 17), size_t{512} << 10);
  EXPECT_EQ(shm_ring_bytes_for(o, 64), size_t{64} << 10);
  EXPECT_EQ(shm_ring_bytes_for(o, 1024), size_t{64} << 10);  // never below 64 KiB
  o.shm_ring_bytes = 100000;                                 // not a power of two: rounded down
  EXPECT_EQ(shm_ring_bytes_for(o, 2), size_t{64} << 10);
}

// Runs `body` in a child process whose /dev/shm is a tmpfs of `kib` KiB (a mount namespace of
// its own, as a container's /dev/shm is); returns the child's exit status, or -1 when this
// machine does not let the test make one (not root, no mount namespaces).
int with_small_dev_shm(int kib, const std::function<int()>& body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::unshare(CLONE_NEWNS) != 0 ||
        ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("tmpfs", "/dev/shm", "tmpfs", 0, ("size=" + std::to_string(kib) + "k").c_str()) !=
            0) {
      ::_exit(100);
    }
    int rc = 1;
    try {
      rc = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      rc = 2;
    }
    ::_exit(rc);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status)) return 99;
  return WEXITSTATUS(status) == 100 ? -1 : WEXITSTATUS(status);
}

TEST(SharedMemory, ATooSmallDevShmLeavesThePairsOnTcpUnderAuto) {
  // Room for one 2 x 64 KiB segment, not for the three of a 3-rank world.
  const int rc = with_small_dev_shm(200, [] {
    World world(3, [](CommConfig& c) {
      c.transport = Transport::Auto;
      c.shm_ring_bytes = 64 << 10;
    });
    int shm = 0;
    for (int r = 0; r < 3; ++r) shm += world[r].stats().shm_pairs;
    // Correct over whatever mix of transports it got.
    bool ok = true;
    world.run([&](int r, Communicator& c) {
      auto in = testing::make_input(DType::F32, r, 100000);
      c.allreduce(Buffer{DType::F32, in.data(), 100000})->wait();
      if (!testing::matches_reduction(DType::F32, ReduceOp::Sum, 3, in.data(), 100000)) ok = false;
    });
    // Each shared-memory pair is counted by both its ranks; at least one pair had no room.
    return ok && shm < 6 ? 0 : 3;
  });
  if (rc == -1) GTEST_SKIP() << "cannot mount a private /dev/shm here";
  EXPECT_EQ(rc, 0);
}

TEST(SharedMemory, ATooSmallDevShmFailsSetupNamingThePairUnderShm) {
  const int rc = with_small_dev_shm(64, [] {
    try {
      World world(2, [](CommConfig& c) {
        c.transport = Transport::Shm;
        c.shm_ring_bytes = 64 << 10;
        c.timeout = std::chrono::seconds(10);
      });
    } catch (const std::exception& e) {
      const std::string what = e.what();
      std::fprintf(stderr, "%s\n", what.c_str());
      return what.find("ranks 0 and 1") != std::string::npos &&
                     what.find("No space left on device") != std::string::npos
                 ? 0
                 : 4;
    }
    return 5;
  });
  if (rc == -1) GTEST_SKIP() << "cannot mount a private /dev/shm here";
  EXPECT_EQ(rc, 0);
}

}  // namespace
}  // namespace cohort::comm
