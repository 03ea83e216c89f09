// Which configuration is fastest at each world size: the job's own configuration, then one
// choice at a time moved from the best so far (algorithm, then bucket size, then codec, then
// synchronization mode), each simulated (step.h). A coordinate search, not every combination:
// a few dozen simulations per world instead of hundreds, and each choice is judged with the
// others at their best so far.
#pragma once

#include <string>
#include <vector>

#include "cohort/sim/profile.h"
#include "cohort/sim/step.h"

namespace cohort::sim {

struct SweepRow {
  Layout layout;
  Choice choice;
  Prediction prediction;
  std::string varied;  // "job" for the job's own configuration, else the choice moved
};

struct SweepWorld {
  Layout layout;
  std::vector<SweepRow> rows;  // rows[0] is the job's configuration
  size_t best = 0;             // index of the fastest row
};

struct SweepOptions {
  std::vector<double> bucket_mb = {1, 4, 25, 64};
  bool codecs = true;       // try every codec the profile has costs for
  bool local_sgd = true;    // try local SGD (with the job's period, or 8)
  bool only_job = false;    // simulate the job's configuration alone
};

SweepWorld sweep(const Profile& profile, const Layout& layout, const Choice& job,
                 const SweepOptions& options);

// "ring, 25 MiB buckets, fp16, allreduce" and the like.
std::string describe(const Choice& c);

}  // namespace cohort::sim
