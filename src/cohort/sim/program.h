// What one step asks of every rank, before any timing: the training thread's actions in order and
// the collectives it hands to the communication thread, with every rank's plan for each (plan.h).
// The same for every rank of a data-parallel job; step.cc times it on the modelled cluster and
// closed_form.cc with formulas.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cohort/sim/plan.h"
#include "cohort/sim/profile.h"
#include "cohort/sim/step.h"

namespace cohort::sim {

struct Action {
  enum class Kind { Compute, Codec, Launch, Wait };
  Kind kind = Kind::Compute;
  double seconds = 0;  // Compute: of one worker alone with its threads; Codec: on one core
  int op = -1;         // Launch, Wait: the collective
};

// One collective of the step: what it is and every rank's plan for it.
struct Collective {
  CollectiveSpec spec;
  std::string codec;        // whose work costs the plan's encodes and decodes ("" for none)
  comm::Algorithm algorithm = comm::Algorithm::Auto;  // what it resolved to (allreduces)
  std::shared_ptr<const std::vector<RankPlan>> plans;
  // A codec's work on the communication thread (one core), in a callback of the collective before
  // (Work::then): before this one's exchanges start, and after they end (PowerSGD's Q = M^T P
  // before Q's allreduce, its decoding after it).
  double before_s = 0;
  double after_s = 0;
};

struct StepProgram {
  std::vector<Action> actions;
  std::vector<Collective> ops;
  size_t buckets = 0;
};

// Which step of a sync mode: a step of allreduce, a local step of local SGD (no exchange), or the
// step of local SGD that ends with an average of the parameters.
enum class StepKind { Allreduce, Local, Averaging };

// `step` of `choice` on a world whose rank r is on host host_of[r]. Throws Error for a codec the
// profile has no cost for.
StepProgram make_program(const Profile& profile, const Choice& choice,
                         const std::vector<int>& host_of, StepKind step);

// The ranks' hosts of a layout: ranks numbered host by host.
std::vector<int> hosts_of(const Layout& layout);

}  // namespace cohort::sim
