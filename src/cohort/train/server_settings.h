// What the parameter servers are told of a job (no libtorch): the optimizer they apply.
#pragma once

#include "cohort/ps/optimizer.h"
#include "cohort/train/config.h"

namespace cohort::train {

// The job's train.optimizer in the servers' terms (ps/optimizer.h).
ps::OptimizerSettings server_optimizer(const JobConfig& config);

}  // namespace cohort::train
