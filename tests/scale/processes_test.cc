// A world of 256 separate processes (`cohort bench allreduce`), each verifying its sums.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "../cli/cohort_process.h"

namespace cohort::testing {
namespace {

// 256 separate processes, each verifying its sums: a world above the full-mesh size, whose pairs
// connect on first use, and a store serving every rank at once. Under ASan on 2 CPUs the 256
// ranks take 70 s to start on a quiet machine and took over 120 s in a slower spell of the same
// machine (about 0.5 s of CPU each): the deadline of setup and of each collective is 200 s, within
// the 280 s this test waits for the launcher and ctest's 300 s (a release build takes 12 s; TSan
// 55 s). A rank starved of CPU for longer than the store's 5 s handshake deadline is closed by the
// store and dials it again.
TEST(Processes, A256RankWorldAllreduces) {
  CohortProcess p({"bench", "allreduce", "--ranks", "256", "--sizes", "4K,64K", "--iters", "3",
                   "--warmup", "1", "--timeout", "200000", "--json"});
  auto st = p.wait_for(280s);
  ASSERT_TRUE(st) << "launcher still running after 280 s\n" << p.err();
  ASSERT_TRUE(exited_with(st, 0)) << p.err();
  std::vector<nlohmann::json> lines;
  std::istringstream out(p.out());
  for (std::string line; std::getline(out, line);) {
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  }
  ASSERT_EQ(lines.size(), 2u) << p.out();
  for (const auto& j : lines) {
    EXPECT_EQ(j["ranks"], 256);
    EXPECT_GT(j["time_us"].get<double>(), 0);
  }
  EXPECT_TRUE(p.reap_group(10s)) << "ranks left behind";
  // Every rank dials rank 0 at once (with fewer CPUs than ranks the 4 KiB allreduce is the
  // linear one): none of them was turned away and had to dial again.
  EXPECT_EQ(p.err().find("closed connection from"), std::string::npos) << p.err();
}

}  // namespace
}  // namespace cohort::testing
