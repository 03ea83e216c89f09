// A worker's claim on its rank: a rank names one process for the whole job; a process restarted
// under a rank that has joined before (by mpirun, srun or Kubernetes) joins as a replacement under
// a fresh rank, and the coordinator learns of ranks it did not start.
#include "cohort/elastic/rank_claim.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/elastic/job_protocol.h"
#include "cohort/store/memory_store.h"

namespace cohort::elastic {
namespace {

store::Bytes record(int pid) {
  return store::to_bytes("{\"host\":\"h\",\"pid\":" + std::to_string(pid) + "}");
}

int rank_limit(store::Store& s) {
  return std::stoi(store::to_string(s.get(keys::kRankLimit)));
}

TEST(RankClaim, ATakenRankGivesWayToAFreshReplacementRank) {
  store::MemoryStore s;
  EXPECT_EQ(claim_rank(s, 2, 4, 7, record(10)), 2);
  EXPECT_EQ(rank_limit(s), 3);
  EXPECT_EQ(claim_rank(s, 0, 4, 7, record(11)), 0);
  EXPECT_EQ(rank_limit(s), 3);  // never lowered
  // Rank 2 again (its first process died and its launcher started another): a replacement.
  EXPECT_EQ(claim_rank(s, 2, 4, 7, record(12)), 4);
  EXPECT_EQ(store::to_string(s.get(keys::joined(4))), store::to_string(record(12)));
  EXPECT_EQ(store::to_string(s.get(keys::joined(2))), store::to_string(record(10)));
  EXPECT_EQ(rank_limit(s), 5);
  EXPECT_EQ(claim_rank(s, 2, 4, 7, record(13)), 5);
  EXPECT_EQ(claim_rank(s, 0, 4, 7, record(14)), 6);
  // The job admits 4 workers and 3 replacements.
  try {
    claim_rank(s, 2, 4, 7, record(15));
    FAIL() << "a rank past the limit was handed out";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("4 workers and 3 replacements"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(claim_rank(s, 9, 4, 7, record(16)), ConfigError);
}

TEST(RankClaim, WithoutARankWorkersAreNumberedInArrivalOrder) {
  store::MemoryStore s;
  EXPECT_EQ(claim_rank(s, -1, 2, 4, record(1)), 0);
  EXPECT_EQ(claim_rank(s, -1, 2, 4, record(2)), 1);
  EXPECT_EQ(rank_limit(s), 2);
}

// Processes that claim the same rank at once: exactly one gets it, each of the others a rank of
// its own.
TEST(RankClaim, ConcurrentClaimsOfOneRankHandOutDistinctRanks) {
  store::MemoryStore s;
  constexpr int kClaimants = 8;
  std::vector<int> got(kClaimants, -1);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClaimants; ++i) {
    threads.emplace_back([&, i] { got[i] = claim_rank(s, 1, 2, 2 + kClaimants, record(100 + i)); });
  }
  for (auto& t : threads) t.join();
  std::set<int> distinct(got.begin(), got.end());
  EXPECT_EQ(distinct.size(), static_cast<size_t>(kClaimants));
  EXPECT_TRUE(distinct.count(1));
  // The others: replacements 2, 3, ..., counted up from the worker count.
  EXPECT_EQ(*distinct.rbegin(), 2 + kClaimants - 2);
  EXPECT_EQ(rank_limit(s), 2 + kClaimants - 1);
}

}  // namespace
}  // namespace cohort::elastic
