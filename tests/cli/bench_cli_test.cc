// `cohort bench allreduce` end to end: real launcher, real rank processes, real loopback sockets.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "cohort/base/cpu_binding.h"
#include "cohort_process.h"

namespace cohort::testing {
namespace {

std::vector<nlohmann::json> json_lines(const std::string& out) {
  std::vector<nlohmann::json> lines;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  }
  return lines;
}

struct BenchCase {
  int ranks;
  std::string algo;
  std::string transport;  // what --transport asks for; auto carries same-host pairs over shm
};

void PrintTo(const BenchCase& c, std::ostream* os) {
  *os << c.algo << ", " << c.ranks << " ranks, transport " << c.transport;
}

class BenchJson : public ::testing::TestWithParam<BenchCase> {};

// Every line carries the public contract's fields, the sizes asked for in order, and bandwidths
// that follow nccl-tests' definitions from the reported time. Sizes include one whose element
// count does not divide by the rank count; the ranks verify every sum before timing.
TEST_P(BenchJson, PrintsOneContractLinePerSize) {
  const auto& c = GetParam();
  CohortProcess p({"bench", "allreduce", "--ranks", std::to_string(c.ranks), "--sizes",
                   "4K,4100,256K", "--algo", c.algo, "--iters", "20", "--warmup", "2", "--timeout",
                   "20000", "--transport", c.transport, "--json"});
  auto st = p.wait_for(90s);
  ASSERT_TRUE(st) << "launcher still running after 90 s\n" << p.err();
  ASSERT_TRUE(exited_with(st, 0)) << p.err();
  auto lines = json_lines(p.out());
  ASSERT_EQ(lines.size(), 3u) << p.out();
  const uint64_t sizes[] = {4096, 4100, 256 << 10};
  for (size_t i = 0; i < lines.size(); ++i) {
    const auto& j = lines[i];
    EXPECT_EQ(j["collective"], "allreduce");
    EXPECT_EQ(j["algorithm"], c.algo);
    EXPECT_EQ(j["library"], "cohort");
    EXPECT_EQ(j["transport"], c.transport == "tcp" ? "tcp" : "shm");
    EXPECT_EQ(j["ranks"], c.ranks);
    EXPECT_EQ(j["bytes"].get<uint64_t>(), sizes[i]);
    EXPECT_EQ(j["iters"], 20);
    double t = j["time_us"].get<double>();
    ASSERT_GT(t, 0);
    double algbw = sizes[i] / (t * 1e-6) / 1e9;
    EXPECT_NEAR(j["algbw_gbps"].get<double>(), algbw, 1e-4 + algbw * 1e-3);
    EXPECT_NEAR(j["busbw_gbps"].get<double>(), algbw * 2 * (c.ranks - 1) / c.ranks,
                1e-4 + algbw * 1e-3);
  }
  EXPECT_TRUE(p.reap_group(5s)) << "ranks left behind";
}

INSTANTIATE_TEST_SUITE_P(Algorithms, BenchJson,
                         ::testing::Values(BenchCase{2, "auto", "auto"},
                                           BenchCase{3, "ring", "tcp"},
                                           BenchCase{3, "halving_doubling", "shm"},
                                           BenchCase{4, "halving_doubling", "tcp"}),
                         [](const auto& info) {
                           return info.param.algo + "_" + std::to_string(info.param.ranks) + "_" +
                                  info.param.transport;
                         });

TEST(BenchCli, PrintsAnAlignedTableWithoutJson) {
  CohortProcess p(
      {"bench", "allreduce", "--ranks", "2", "--sizes", "4K,1M", "--iters", "10", "--warmup", "1"});
  auto st = p.wait_for(60s);
  ASSERT_TRUE(exited_with(st, 0)) << p.err();
  std::string out = p.out();
  EXPECT_NE(out.find("busbw_GB/s"), std::string::npos) << out;
  EXPECT_NE(out.find("4 KiB"), std::string::npos) << out;
  EXPECT_NE(out.find("1 MiB"), std::string::npos) << out;
}

TEST(BenchCli, RejectsInvalidSizesWithoutStartingRanks) {
  for (const char* sizes : {"4X", "6", "", "4K,,1M"}) {
    CohortProcess p({"bench", "allreduce", "--sizes", sizes});
    auto st = p.wait_for(20s);
    ASSERT_TRUE(exited_with(st, 2)) << sizes << ": " << p.err();
    EXPECT_NE(p.err().find("--sizes"), std::string::npos) << p.err();
  }
}

// The communicator settings travel to the ranks, which verify every sum under them (1 KiB
// segments: hundreds per block; the textbook ring order; small socket buffers).
TEST(BenchCli, RunsWithTheCommunicatorSettingsGiven) {
  std::vector<std::string> cmd = {"bench",     "allreduce", "--ranks", "3",       "--sizes",
                                  "4100,256K", "--algo",    "ring",    "--iters", "5",
                                  "--warmup",  "1",         "--json"};
  cmd.insert(cmd.end(), {"--chunk", "1K", "--ring-window", "0", "--socket-buffer", "64K",
                         "--remote-socket-buffer", "128K"});
  CohortProcess p(cmd);
  auto st = p.wait_for(60s);
  ASSERT_TRUE(st) << "launcher still running after 60 s\n" << p.err();
  ASSERT_TRUE(exited_with(st, 0)) << p.err();
  EXPECT_EQ(json_lines(p.out()).size(), 2u) << p.out();
  for (std::vector<std::string> bad : {std::vector<std::string>{"--chunk", "0"},
                                       {"--chunk", "2X"},
                                       {"--ring-window", "-1"},
                                       {"--socket-buffer", "2G"},
                                       {"--remote-socket-buffer", "3G"}}) {
    std::vector<std::string> args = {"bench", "allreduce"};
    args.insert(args.end(), bad.begin(), bad.end());
    CohortProcess q(args);
    ASSERT_TRUE(exited_with(q.wait_for(20s), 2)) << bad[0] << " " << bad[1] << ": " << q.err();
    EXPECT_NE(q.err().find(bad[0]), std::string::npos) << q.err();
  }
}

// Each rank is bound to its own share of the CPUs the launcher may use while there are at most
// as many ranks as CPUs (mpirun's default); unbound when oversubscribed or with --bind-to none.
// Rank 0 reports how many CPUs its affinity mask holds.
TEST(BenchCli, BindsEachRankToItsOwnCpusWhenThereAreEnough) {
  const std::vector<int> cpus = allowed_cpus();
  const int n = static_cast<int>(cpus.size());
  if (n < 2) GTEST_SKIP() << "this process may use one CPU only";
  auto cpus_of_rank0 = [](const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"bench", "allreduce", "--sizes", "4K",    "--iters",
                                     "5",     "--warmup",  "1",       "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    CohortProcess p(args);
    auto st = p.wait_for(60s);
    EXPECT_TRUE(st && exited_with(st, 0)) << p.err();
    auto lines = json_lines(p.out());
    return lines.size() == 1 ? lines[0].value("cpus_per_rank", -1) : -2;
  };
  EXPECT_EQ(cpus_of_rank0({"--ranks", "2"}), static_cast<int>(cpu_share(cpus, 0, 2).size()));
  EXPECT_EQ(cpus_of_rank0({"--ranks", "2", "--bind-to", "none"}), n);
  if (n <= 8) {
    EXPECT_EQ(cpus_of_rank0({"--ranks", std::to_string(n + 1)}), n);
  }
  CohortProcess bad({"bench", "allreduce", "--bind-to", "socket"});
  ASSERT_TRUE(exited_with(bad.wait_for(20s), 2));
  EXPECT_NE(bad.err().find("--bind-to"), std::string::npos) << bad.err();
}

TEST(BenchCli, RejectsUnknownAlgorithmAndRankCount) {
  CohortProcess a({"bench", "allreduce", "--algo", "bcube"});
  ASSERT_TRUE(exited_with(a.wait_for(20s), 2));
  EXPECT_NE(a.err().find("bcube"), std::string::npos) << a.err();
  CohortProcess r({"bench", "allreduce", "--ranks", "0"});
  ASSERT_TRUE(exited_with(r.wait_for(20s), 2));
  EXPECT_NE(r.err().find("--ranks"), std::string::npos) << r.err();
}

// A rank reads the job token from the environment only; without it, it refuses to start.
TEST(BenchCli, RankWithoutTokenRefusesToStart) {
  CohortProcess p({"bench", "allreduce", "--worker-rank", "0", "--store", "127.0.0.1:1"},
                  {"COHORT_BENCH_TOKEN"});
  ASSERT_TRUE(exited_with(p.wait_for(20s), 2)) << p.err();
  EXPECT_NE(p.err().find("COHORT_BENCH_TOKEN"), std::string::npos) << p.err();
}

// A benchmark that runs long after its first line: 4 KiB, then 64 MiB 300 times.
const std::vector<std::string> kLongBench = {"bench",  "allreduce", "--ranks", "3",     "--sizes",
                                             "4K,64M", "--iters",   "300",     "--json"};

// Ctrl-C reaches the launcher, which kills and reaps every rank before it exits.
TEST(BenchCli, InterruptStopsEveryRank) {
  CohortProcess p(kLongBench);
  // The first size's line: every rank is past its start and inside the long second size.
  ASSERT_TRUE(p.wait_for_output("\"bytes\":4096", 60s)) << "ranks did not start\n" << p.err();
  kill(p.pid(), SIGINT);
  auto st = p.wait_for(15s);
  ASSERT_TRUE(st) << "launcher ignored SIGINT";
  EXPECT_TRUE(exited_with(st, 128 + SIGINT)) << p.err();
  EXPECT_NE(p.err().find("interrupted"), std::string::npos) << p.err();
  // The launcher reaped its ranks itself: nothing of the group is left, not even a zombie.
  EXPECT_TRUE(group_members(p.pid()).empty());
}

// A launcher killed outright cannot clean up; its ranks die with it (PR_SET_PDEATHSIG).
TEST(BenchCli, RanksDieWithAKilledLauncher) {
  CohortProcess p(kLongBench);
  // The first size's line: every rank is past its start and inside the long second size.
  ASSERT_TRUE(p.wait_for_output("\"bytes\":4096", 60s)) << "ranks did not start\n" << p.err();
  kill(p.pid(), SIGKILL);
  ASSERT_TRUE(p.wait_for(10s));
  EXPECT_TRUE(p.reap_group(10s)) << group_members(p.pid()).size() << " ranks outlived the launcher";
}

}  // namespace
}  // namespace cohort::testing
