// The learning-rate schedule: linear warmup to a peak that optionally scales with the world size.
//
//   peak   = lr x world_size   (scaling: linear, the "linear scaling rule" of Goyal et al. 2017)
//          = lr                (scaling: none)
//   lr(s)  = peak x min(1, (s + 1) / warmup_steps)   for the 0-based optimizer step s
//
// Warmup matters most with linear scaling: a large peak rate applied to freshly initialised
// weights diverges. When the world size changes (elastic training), build a new schedule with
// the new world size and keep counting steps: the peak follows the number of workers.
#pragma once

#include <cstdint>

#include "cohort/train/config.h"

namespace cohort::train {

class LrSchedule {
 public:
  LrSchedule(const OptimizerConfig& optimizer, const LrScheduleConfig& schedule, int world_size);
  double at(int64_t step) const;
  double peak() const { return peak_; }

 private:
  double peak_;
  int64_t warmup_;
};

}  // namespace cohort::train
