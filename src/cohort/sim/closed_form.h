// The alpha-beta-gamma estimate: each collective's time from the textbook formula of its
// algorithm on an idle network (alpha: latency per message, beta: seconds per byte, gamma:
// seconds per byte reduced), and a step from those times laid on the same timeline as the
// simulator's (buckets ready at their calibrated times, one collective after another) without
// any sharing of links or cores beyond dividing a host's cores among its ranks. Printed beside
// the simulation as a cross-check: the two agree on an idle network and part where contention,
// pipelining or the schedule's details count.
#pragma once

#include <cstddef>

#include "cohort/comm/types.h"
#include "cohort/sim/profile.h"
#include "cohort/sim/step.h"

namespace cohort::sim {

struct Costs {
  double alpha = 0;  // s per message
  double beta = 0;   // s per byte
  double gamma = 0;  // s per byte reduced
};

// Ring: 2(n-1) alpha + 2(n-1)/n S beta + (n-1)/n S gamma.
double ring_allreduce_s(int n, double bytes, const Costs& c);
// Halving-doubling over p = 2^floor(log2 n) ranks, plus the fold of the other n - p.
double halving_doubling_allreduce_s(int n, double bytes, const Costs& c);
// Recursive doubling: log2(p) exchanges of the whole buffer, plus the fold.
double recursive_doubling_allreduce_s(int n, double bytes, const Costs& c);
// Linear: rank 0 receives and reduces n - 1 buffers in turn and sends the result to each:
// 2(n-1)(alpha + S beta) + (n-1) S gamma.
double linear_allreduce_s(int n, double bytes, const Costs& c);

// The estimate of one step (Prediction::closed_form_step_s).
double closed_form_step_s(const Profile& profile, const Layout& layout, const Choice& choice);

}  // namespace cohort::sim
