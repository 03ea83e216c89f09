// Stragglers: ranks that are consistently slower than the others.
//
// In synchronous data parallelism every rank's step takes the same wall time, because each waits
// for the slowest in the gradient allreduce. What differs is how the step is spent: a straggler is
// busy (loading data, computing) for longer, and the others wait for it. So the test is on busy
// time: at step s rank r is slow when
//   busy(r, s) > median over the other ranks of busy(·, s) * (1 + margin), and the excess is over
//   kMinExcessSeconds (differences of less than a millisecond are scheduler noise),
// and rank r is a straggler when it is slow at `window` consecutive steps that every rank
// reported. The median of the *other* ranks keeps the test meaningful with two ranks.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

namespace cohort::trace {

struct StragglerOptions {
  double margin = 0.25;  // debug.straggler_margin
  int64_t window = 20;   // debug.straggler_window
};
constexpr double kMinExcessSeconds = 0.001;

struct Straggler {
  int rank = 0;
  int64_t first_step = 0;  // the run of slow steps it was named for
  int64_t last_step = 0;
  double busy_s = 0;           // its mean busy time over those steps
  double others_median_s = 0;  // mean over those steps of the others' median
  double ratio() const { return others_median_s > 0 ? busy_s / others_median_s : 0; }
  std::string describe() const;  // "rank 2 is a straggler: busy 0.215 s per step against ..."
  nlohmann::json to_json() const;
};

// Busy seconds by rank, then by step.
using BusyTable = std::map<int, std::map<int64_t, double>>;

// Every rank that is a straggler somewhere in `busy`, with its longest run of slow steps (the
// first one on a tie). Steps some rank did not report are skipped; with fewer than two ranks
// there is no straggler.
std::vector<Straggler> find_stragglers(const BusyTable& busy, const StragglerOptions& options);

// Live detection for the launcher: feed each rank's recent busy times as they arrive; poll()
// returns each straggler once, when its first full window of slow steps is seen. Keeps the last
// few windows of steps per rank.
class StragglerWatch {
 public:
  explicit StragglerWatch(StragglerOptions options) : options_(options) {}
  // busy[i] is the busy time of step first_step + i. Steps seen before are overwritten.
  void observe(int rank, int64_t first_step, const std::vector<double>& busy);
  // Ranks no longer in the job (their steps would block every comparison).
  void forget(int rank);
  std::vector<Straggler> poll();

 private:
  StragglerOptions options_;
  BusyTable busy_;
  std::set<int> reported_;
};

}  // namespace cohort::trace
