#include "cohort/train/server_settings.h"

namespace cohort::train {

ps::OptimizerSettings server_optimizer(const JobConfig& config) {
  const OptimizerConfig& o = config.train.optimizer;
  return {.kind = o.name == OptimizerKind::Adam ? ps::OptimizerKind::Adam : ps::OptimizerKind::Sgd,
          .momentum = o.name == OptimizerKind::Sgd ? o.momentum : 0.0,
          .weight_decay = o.weight_decay,
          .beta1 = o.betas[0],
          .beta2 = o.betas[1],
          .eps = o.eps};
}

}  // namespace cohort::train
