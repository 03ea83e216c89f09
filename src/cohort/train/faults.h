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
  FaultInjector(const std::vector<FaultConfig>& all, int64_t rank);

  // At the boundary where `completed` steps are done. Kill and hang do not come back (hang: not
  // for `seconds`); disconnect cuts `comm`'s connections (nothing without one).
  void at_step(int64_t completed, comm::Communicator* comm);
  // Extra seconds this step takes (slow faults that have begun).
  double slowdown(int64_t completed) const;

 private:
  std::vector<FaultConfig> faults_;
  std::set<std::ptrdiff_t> fired_;
};

}  // namespace cohort::train
