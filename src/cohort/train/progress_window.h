// Rank 0's progress records (metrics.jsonl, the progress line, the console's curves): the mean
// loss, the accuracy on the training batches and the rates over the steps since the previous
// record.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "cohort/base/clock.h"

namespace cohort::train {

class ProgressWindow {
 public:
  // One step: its mean loss, correct predictions among `seen` samples of this rank, and the
  // samples of all ranks together.
  void add(double loss, int64_t correct, int64_t seen, int64_t global_batch) {
    loss_ += loss;
    correct_ += correct;
    seen_ += seen;
    samples_ += global_batch;
    ++steps_;
  }
  // Time that is not training (an evaluation) does not count in the rates.
  void exclude(Clock::duration d) { start_ += d; }

  // The record of the window, which starts again.
  nlohmann::json record(int64_t step, int64_t total_steps, int64_t epoch, int64_t epochs, double lr,
                        int world) {
    const double dt = seconds_since(start_);
    nlohmann::json r{{"step", step},
                     {"total_steps", total_steps},
                     {"epoch", epoch},
                     {"epochs", epochs},
                     {"loss", steps_ > 0 ? loss_ / static_cast<double>(steps_) : 0.0},
                     {"accuracy", seen_ > 0 ? static_cast<double>(correct_) / seen_ : 0.0},
                     {"lr", lr},
                     {"samples_per_sec", dt > 0 ? samples_ / dt : 0.0},
                     {"steps_per_sec", dt > 0 ? steps_ / dt : 0.0},
                     {"world_size", world},
                     {"time", wall_seconds()}};
    *this = ProgressWindow();
    return r;
  }

 private:
  Clock::time_point start_ = Clock::now();
  int64_t steps_ = 0, samples_ = 0, correct_ = 0, seen_ = 0;
  double loss_ = 0;
};

}  // namespace cohort::train
