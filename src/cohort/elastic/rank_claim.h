// A worker's claim on its rank in the job's store.
//
// Workers started by `cohort run` get their ranks from it; workers started by a cluster's launcher
// (mpirun, srun, a Kubernetes Indexed Job) take theirs from its variables, and such a launcher
// restarts a failed worker under the same rank. A rank names one process for the whole job (the
// coordinator keeps a lost rank lost), so a process that finds its rank already claimed joins as a
// replacement instead, under a fresh rank counted up from the job's worker count, as the
// replacements `cohort run` starts. (Mixing the two on one job, external replacements beside the
// launcher's own, can hand a launcher's replacement another rank than the one it was started with.)
#pragma once

#include "cohort/store/store.h"

namespace cohort::elastic {

// Claims `wanted` (negative: the next of 0, 1, 2, ... in arrival order) for this process, whose
// joined record is `record`; a rank claimed before gives way to a fresh one in [workers, limit).
// Publishes the highest rank claimed so far (keys::kRankLimit), so that the coordinator watches
// ranks it did not start. Returns the rank; ConfigError when the job admits no more.
int claim_rank(store::Store& store, int wanted, int workers, int limit, const store::Bytes& record);

}  // namespace cohort::elastic
