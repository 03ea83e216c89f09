#include "cohort/train/schedule.h"

#include <algorithm>

namespace cohort::train {

LrSchedule::LrSchedule(const OptimizerConfig& optimizer, const LrScheduleConfig& schedule,
                       int world_size)
    : peak_(optimizer.lr * (schedule.scaling == LrScaling::Linear ? std::max(world_size, 1) : 1)),
      warmup_(schedule.warmup_steps) {}

double LrSchedule::at(int64_t step) const {
  if (warmup_ <= 0 || step + 1 >= warmup_) return peak_;
  return peak_ * static_cast<double>(std::max<int64_t>(step + 1, 1)) / static_cast<double>(warmup_);
}

}  // namespace cohort::train
