#include "cohort/elastic/rank_claim.h"

#include <spdlog/spdlog.h>

#include <string>

#include "cohort/base/error.h"
#include "cohort/elastic/job_protocol.h"

namespace cohort::elastic {

namespace {

// Raises keys::kRankLimit to rank + 1 unless it is higher already.
void publish_rank(store::Store& store, int rank) {
  const store::Bytes want = store::to_bytes(std::to_string(rank + 1));
  store::Bytes seen;  // empty: absent
  for (;;) {
    if (!seen.empty()) {
      int limit = 0;
      try {
        limit = std::stoi(store::to_string(seen));
      } catch (const std::exception&) {
        limit = 0;  // unreadable: overwritten
      }
      if (limit > rank) return;
    }
    const store::Bytes now = store.compare_set(keys::kRankLimit, seen, want);
    if (now == want) return;
    seen = now;
  }
}

}  // namespace

int claim_rank(store::Store& store, int wanted, int workers, int limit,
               const store::Bytes& record) {
  auto claim = [&](int r) { return store.compare_set(keys::joined(r), {}, record) == record; };
  auto out_of_range = [&](int r) {
    return ConfigError("rank " + std::to_string(r) + " is out of range for a job of " +
                       std::to_string(workers) + " workers and " + std::to_string(limit - workers) +
                       " replacements");
  };
  int rank = wanted >= 0 ? wanted : static_cast<int>(store.add(keys::kNextRank, 1) - 1);
  if (rank >= limit) throw out_of_range(rank);
  if (!claim(rank)) {
    const int taken = rank;
    do {
      rank = workers + static_cast<int>(store.add(keys::kNextReplacement, 1) - 1);
      if (rank >= limit) throw out_of_range(rank);
    } while (!claim(rank));
    spdlog::info("rank {} has joined this job before: joining as replacement rank {}", taken, rank);
  }
  publish_rank(store, rank);
  return rank;
}

}  // namespace cohort::elastic
