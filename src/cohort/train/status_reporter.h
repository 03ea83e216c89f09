// A rank's live status for the console and the launcher: step time, the share of it spent waiting
// on gradient exchange, a histogram of that wait, the latency histograms of every kind of
// collective (from the flight recorder), the step's breakdown (data, compute, sync), and the busy
// time (data + compute) of every step since the previous record and of the `window` before (so
// that a reader who misses one record still sees whole windows), from which the launcher tells
// stragglers (trace/straggler.h). Published about twice a second.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <nlohmann/json.hpp>

#include "cohort/base/clock.h"
#include "cohort/base/histogram.h"
#include "cohort/comm/flight_recorder.h"

namespace cohort::train {

class StatusReporter {
 public:
  // `report` may be empty: then nothing is published.
  StatusReporter(std::function<void(const nlohmann::json&)> report,
                 const comm::FlightRecorder& recorder, size_t window);

  void step(int64_t step, double data_s, double compute_s, double wait_seconds, int64_t samples);
  // Parameter servers (ssp, async): how many steps the parameters of the next step lag this
  // rank's (published as "staleness"; -1: not such a mode).
  void set_staleness(int64_t s) { staleness_ = s; }
  // Publishes if `force` or half a second has passed since the last record.
  void maybe_report(const char* state, int64_t step, int64_t total, int64_t epoch, uint64_t bytes,
                    bool force = false);

 private:
  std::function<void(const nlohmann::json&)> report_;
  const comm::FlightRecorder& recorder_;
  LatencyHistogram wait_hist_;
  Clock::time_point last_ = Clock::now();
  int64_t steps_ = 0, samples_ = 0;
  double step_seconds_ = 0, wait_seconds_ = 0, data_seconds_ = 0, compute_seconds_ = 0;
  size_t window_;
  static constexpr size_t kMaxBusy = 4096;
  std::deque<int64_t> busy_;  // microseconds
  int64_t busy_last_ = -1;
  int64_t staleness_ = -1;
};

}  // namespace cohort::train
