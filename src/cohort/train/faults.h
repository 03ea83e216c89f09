// The job's faults (config.h, `faults:`): (rank, at_step, kind) fire at the step boundaries of that
// rank, in Cohort's trainer and in a Python worker's cohort.report(step=...). A fault fires once
// per worker process (a replacement that redoes the step fires it again).
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <vector>

#include "cohort/comm/communicator.h"
#include "cohort/train/config.h"

namespace cohort::train {

class FaultInjector {
 public:
  // `workers` and `seed` (the job's) choose the stragglers of a stragglers fault.
  FaultInjector(const std::vector<FaultConfig>& all, int64_t rank, int64_t workers, uint64_t seed);

  // At the boundary where `completed` steps are done. Kill and hang do not come back (hang: not
  // for `seconds`); disconnect cuts `comm`'s connections (nothing without one).
  void at_step(int64_t completed, comm::Communicator* comm);
  // Extra seconds the step after `completed` steps takes, given what it took itself (`busy_s`):
  // slow faults that have begun add their seconds, or (factor - 1) x busy_s; a stragglers fault
  // adds (factor - 1) x busy_s when this rank is its window's straggler.
  double slowdown(int64_t completed, double busy_s) const;
  // The straggler of a stragglers fault in the window of the step after `completed` steps; -1
  // before it begins. The same on every rank.
  static int64_t straggler(const FaultConfig& f, int64_t completed, int64_t workers, uint64_t seed);

 private:
  int64_t rank_, workers_;
  uint64_t seed_;
  std::vector<FaultConfig> faults_;
  std::set<std::ptrdiff_t> fired_;
};

}  // namespace cohort::train
