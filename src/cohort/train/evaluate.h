// Evaluation on the test set, shared out over the ranks of a communicator.
#pragma once

#include "cohort/comm/communicator.h"
#include "cohort/train/dataset.h"
#include "cohort/train/models.h"

namespace cohort::train {

struct Evaluation {
  double accuracy = 0;
  double loss = 0;
};

// Rank r evaluates test examples r, r+W, r+2W, ... with its own model; correct counts and loss
// sums are added up over the ranks (one allreduce), so every rank gets the same result.
Evaluation evaluate(Model& model, const Dataset& test, comm::Communicator& comm);
// Every test example, by this process alone.
Evaluation evaluate(Model& model, const Dataset& test);

}  // namespace cohort::train
