// Fault drills across real processes: one rank of `cohort bench allreduce` kills or stops itself
// while an allreduce is in flight, and every other rank must fail with an error that names it —
// within the collective timeout, never by hanging.
#include <gtest/gtest.h>

#include <regex>

#include "cohort_process.h"

namespace cohort::testing {
namespace {

struct Drill {
  std::string algo;
  int ranks;
  int fault_rank;
};

void PrintTo(const Drill& d, std::ostream* os) {
  *os << d.algo << ", " << d.ranks << " ranks, fault on rank " << d.fault_rank;
}

std::string name(const ::testing::TestParamInfo<Drill>& info) {
  return info.param.algo + "_" + std::to_string(info.param.ranks) + "ranks_fault" +
         std::to_string(info.param.fault_rank);
}

std::vector<std::string> drill_args(const Drill& d, const char* fault, int timeout_ms) {
  return {"bench",        "allreduce", "--ranks", std::to_string(d.ranks),
          "--sizes",      "1M",        "--algo",  d.algo,
          "--iters",      "200",       "--warmup", "0",
          "--timeout",    std::to_string(timeout_ms),
          "--fault",      fault,       "--fault-rank", std::to_string(d.fault_rank),
          "--fault-after-iters", "7"};
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
}

INSTANTIATE_TEST_SUITE_P(Ranks, KillDrill,
                         ::testing::Values(Drill{"ring", 3, 1}, Drill{"ring", 4, 0},
                                           Drill{"halving_doubling", 4, 2},
                                           Drill{"halving_doubling", 3, 2}),
                         name);

class StopDrill : public ::testing::TestWithParam<Drill> {};

TEST_P(StopDrill, SurvivorsTimeOutNamingTheStoppedRank) {
  const Drill& d = GetParam();
  const int timeout_ms = 3000;
  CohortProcess p(drill_args(d, "stop", timeout_ms));
  auto st = p.wait_for(std::chrono::milliseconds(timeout_ms) + 30s);
  ASSERT_TRUE(st) << "launcher hung\n" << p.err();
  EXPECT_TRUE(exited_with(st, 1)) << p.err();
  const std::string err = p.err();
  // Every survivor times out in the same collective and names only the stopped rank.
  std::regex report("rank (\\d+) failed: CollectiveTimeoutError \\(allreduce #(\\d+), "
                    "ranks not heard from: \\[([0-9, ]*)\\]\\)");
  std::set<int> reported;
  std::set<std::string> sequences;
  for (std::sregex_iterator it(err.begin(), err.end(), report), end; it != end; ++it) {
    reported.insert(std::stoi((*it)[1]));
    sequences.insert((*it)[2]);
    EXPECT_EQ((*it)[3], std::to_string(d.fault_rank)) << it->str();
  }
  std::set<int> survivors;
  for (int r = 0; r < d.ranks; ++r) {
    if (r != d.fault_rank) survivors.insert(r);
  }
  EXPECT_EQ(reported, survivors) << err;
  EXPECT_EQ(sequences.size(), 1u) << err;
  // Not before the deadline, and not long after it.
  EXPECT_GE(p.seconds(), timeout_ms / 1000.0) << err;
  EXPECT_LT(p.seconds(), timeout_ms / 1000.0 + 10) << err;
  // The stopped rank was killed by the launcher, not left behind.
  EXPECT_NE(err.find("rank " + std::to_string(d.fault_rank) +
                     " did not finish and was killed by the launcher"),
            std::string::npos)
      << err;
  EXPECT_TRUE(group_members(p.pid()).empty());
}

INSTANTIATE_TEST_SUITE_P(Ranks, StopDrill,
                         ::testing::Values(Drill{"ring", 3, 1}, Drill{"ring", 4, 3},
                                           Drill{"halving_doubling", 4, 1}),
                         name);

}  // namespace
}  // namespace cohort::testing
