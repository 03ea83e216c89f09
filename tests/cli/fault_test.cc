// Fault drills across real processes: one rank of `cohort bench allreduce` kills or stops itself
// while an allreduce is in flight, and every other rank must fail with an error that names it —
// within the collective timeout, never by hanging.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <set>

#include "cohort_process.h"

namespace cohort::testing {
namespace {

struct Drill {
  std::string algo;
  int ranks;
  int fault_rank;
  std::string transport = "shm";
};

void PrintTo(const Drill& d, std::ostream* os) {
  *os << d.algo << ", " << d.ranks << " ranks, fault on rank " << d.fault_rank << ", over "
      << d.transport;
}

std::string name(const ::testing::TestParamInfo<Drill>& info) {
  return info.param.algo + "_" + std::to_string(info.param.ranks) + "ranks_fault" +
         std::to_string(info.param.fault_rank) + "_" + info.param.transport;
}

// The shared-memory segments of the ranks that `launcher` spawned still named in /dev/shm (their
// names start with their parent's pid: transport/shm_pair.cc).
std::vector<std::string> segments_left(int launcher) {
  std::vector<std::string> left;
  const std::string prefix = "cohort-" + std::to_string(launcher) + ".";
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(prefix, 0) == 0) left.push_back(n);
  }
  return left;
}

std::vector<std::string> drill_args(const Drill& d, const char* fault, int timeout_ms) {
  return {"bench",
          "allreduce",
          "--ranks",
          std::to_string(d.ranks),
          "--sizes",
          "1M",
          "--algo",
          d.algo,
          "--iters",
          "200",
          "--warmup",
          "0",
          "--timeout",
          std::to_string(timeout_ms),
          "--fault",
          fault,
          "--fault-rank",
          std::to_string(d.fault_rank),
          "--fault-after-iters",
          "7",
          "--transport",
          d.transport};
}

class KillDrill : public ::testing::TestWithParam<Drill> {};

TEST_P(KillDrill, SurvivorsReportTheLostPeer) {
  const Drill& d = GetParam();
  const int timeout_ms = 10000;
  CohortProcess p(drill_args(d, "kill", timeout_ms));
  auto st = p.wait_for(std::chrono::milliseconds(timeout_ms) + 30s);
  ASSERT_TRUE(st) << "launcher hung\n" << p.err();
  EXPECT_TRUE(exited_with(st, 1)) << p.err();
  const std::string err = p.err();
  // The launcher's verdict names the dead rank first.
  EXPECT_NE(err.find("rank " + std::to_string(d.fault_rank) + " was killed by signal 9"),
            std::string::npos)
      << err;
  for (int r = 0; r < d.ranks; ++r) {
    if (r == d.fault_rank) continue;
    std::string want = "rank " + std::to_string(r) + " failed: PeerLostError (peer rank " +
                       std::to_string(d.fault_rank) + "): ";
    auto at = err.find(want);
    ASSERT_NE(at, std::string::npos) << "no lost-peer report from rank " << r << "\n" << err;
    // The message itself names the dead rank too, for a reader of the log.
    std::string message = err.substr(at + want.size(), err.find('\n', at) - at - want.size());
    EXPECT_NE(message.find("rank " + std::to_string(d.fault_rank)), std::string::npos) << message;
  }
  // A lost connection is noticed at once, not at the timeout.
  EXPECT_LT(p.seconds(), timeout_ms / 1000.0) << err;
  EXPECT_TRUE(group_members(p.pid()).empty());
  EXPECT_EQ(segments_left(p.pid()), std::vector<std::string>{});
}

INSTANTIATE_TEST_SUITE_P(Ranks, KillDrill,
                         ::testing::Values(Drill{"ring", 3, 1}, Drill{"ring", 4, 0},
                                           Drill{"halving_doubling", 4, 2},
                                           Drill{"halving_doubling", 3, 2}, Drill{"linear", 4, 2},
                                           Drill{"linear", 4, 0}, Drill{"ring", 3, 1, "tcp"},
                                           Drill{"halving_doubling", 4, 2, "tcp"}),
                         name);

// "rank R failed: CollectiveTimeoutError (allreduce #S, ranks not heard from: [M])", as the
// launcher prints each rank's outcome.
struct TimeoutReport {
  int rank;
  std::string sequence;
  std::string missing;
};

std::vector<TimeoutReport> timeout_reports(const std::string& err) {
  const std::string mid = " failed: CollectiveTimeoutError (allreduce #";
  const std::string list = ", ranks not heard from: [";
  std::vector<TimeoutReport> out;
  for (size_t at = err.find(mid); at != std::string::npos; at = err.find(mid, at + 1)) {
    size_t r = err.rfind("rank ", at);
    size_t seq = at + mid.size();
    size_t comma = err.find(list, seq);
    size_t close = err.find("])", comma);
    if (r == std::string::npos || comma == std::string::npos || close == std::string::npos) {
      ADD_FAILURE() << "malformed timeout report at " << at << ":\n" << err;
      continue;
    }
    out.push_back({.rank = std::stoi(err.substr(r + 5, at - r - 5)),
                   .sequence = err.substr(seq, comma - seq),
                   .missing = err.substr(comma + list.size(), close - comma - list.size())});
  }
  return out;
}

class StopDrill : public ::testing::TestWithParam<Drill> {};

TEST_P(StopDrill, SurvivorsTimeOutNamingTheStoppedRank) {
  const Drill& d = GetParam();
  const int timeout_ms = 3000;
  CohortProcess p(drill_args(d, "stop", timeout_ms));
  auto st = p.wait_for(std::chrono::milliseconds(timeout_ms) + 30s);
  ASSERT_TRUE(st) << "launcher hung\n" << p.err();
  EXPECT_TRUE(exited_with(st, 1)) << p.err();
  const std::string err = p.err();
  // Every survivor times out and names only the stopped rank. The rank stops just after issuing an
  // allreduce, so data it had already sent may let some survivors finish that collective: they then
  // time out in the next one. Survivors are at most one collective apart.
  std::set<int> reported;
  std::set<std::string> sequences;
  for (const auto& t : timeout_reports(err)) {
    reported.insert(t.rank);
    sequences.insert(t.sequence);
    EXPECT_EQ(t.missing, std::to_string(d.fault_rank)) << "rank " << t.rank << "\n" << err;
  }
  std::set<int> survivors;
  for (int r = 0; r < d.ranks; ++r) {
    if (r != d.fault_rank) survivors.insert(r);
  }
  EXPECT_EQ(reported, survivors) << err;
  ASSERT_GE(sequences.size(), 1u) << err;
  ASSERT_LE(sequences.size(), 2u) << err;
  if (sequences.size() == 2) {
    EXPECT_EQ(std::labs(std::stol(*sequences.rbegin()) - std::stol(*sequences.begin())), 1) << err;
  }
  // Not before the deadline, and not long after it.
  EXPECT_GE(p.seconds(), timeout_ms / 1000.0) << err;
  EXPECT_LT(p.seconds(), timeout_ms / 1000.0 + 10) << err;
  // The stopped rank was killed by the launcher, not left behind.
  EXPECT_NE(err.find("rank " + std::to_string(d.fault_rank) +
                     " did not finish and was killed by the launcher"),
            std::string::npos)
      << err;
  EXPECT_TRUE(group_members(p.pid()).empty());
  EXPECT_EQ(segments_left(p.pid()), std::vector<std::string>{});
}

INSTANTIATE_TEST_SUITE_P(Ranks, StopDrill,
                         ::testing::Values(Drill{"ring", 3, 1}, Drill{"ring", 4, 3},
                                           Drill{"halving_doubling", 4, 1}, Drill{"linear", 4, 2},
                                           Drill{"linear", 4, 0}, Drill{"ring", 3, 1, "tcp"}),
                         name);

}  // namespace
}  // namespace cohort::testing
