#include "cohort/train/status_reporter.h"

#include <algorithm>
#include <string>
#include <vector>

namespace cohort::train {

using nlohmann::json;

namespace {

json histogram_json(const LatencyHistogram& h) {
  json counts = json::array();
  for (size_t i = 0; i < LatencyHistogram::kBuckets; ++i) counts.push_back(h.bucket(i));
  return {{"counts", std::move(counts)}, {"sum", h.sum()}};
}

}  // namespace

StatusReporter::StatusReporter(std::function<void(const json&)> report,
                               const comm::FlightRecorder& recorder, size_t window)
    : report_(std::move(report)),
      recorder_(recorder),
      window_(std::clamp<size_t>(window, 1, 1000)) {}

void StatusReporter::step(int64_t step, double data_s, double compute_s, double wait_seconds,
                          int64_t samples) {
  const double seconds = data_s + compute_s + wait_seconds;
  wait_hist_.observe(wait_seconds);
  steps_ += 1;
  step_seconds_ += seconds;
  wait_seconds_ += wait_seconds;
  data_seconds_ += data_s;
  compute_seconds_ += compute_s;
  samples_ += samples;
  // Consecutive steps only: a rollback starts the window again.
  if (step != busy_last_ + 1) busy_.clear();
  busy_.push_back(static_cast<int64_t>((data_s + compute_s) * 1e6));
  if (busy_.size() > kMaxBusy) busy_.pop_front();
  busy_last_ = step;
}

void StatusReporter::maybe_report(const char* state, int64_t step, int64_t total, int64_t epoch,
                                  uint64_t bytes, bool force) {
  if (!report_ || (!force && seconds_since(last_) < 0.5)) return;
  json latency = json::object();
  for (const auto& [kind, h] : recorder_.latencies()) {
    latency[std::string(comm::op_kind_name(kind))] = histogram_json(h);
  }
  json s{{"state", state},
         {"step", step},
         {"total_steps", total},
         {"epoch", epoch},
         {"bytes_sent", bytes},
         {"comm_wait_hist", histogram_json(wait_hist_)},
         {"collective_latency", std::move(latency)},
         {"time", wall_seconds()}};
  if (steps_ > 0) {
    const auto n = static_cast<double>(steps_);
    s["step_time"] = step_seconds_ / n;
    s["comm_share"] = step_seconds_ > 0 ? wait_seconds_ / step_seconds_ : 0.0;
    s["samples_per_sec"] = step_seconds_ > 0 ? samples_ / step_seconds_ : 0.0;
    s["breakdown"] = {{"data_s", data_seconds_ / n},
                      {"compute_s", compute_seconds_ / n},
                      {"sync_s", wait_seconds_ / n}};
  }
  if (staleness_ >= 0) s["staleness"] = staleness_;
  if (!busy_.empty()) {
    s["busy"] = {{"first_step", busy_last_ - static_cast<int64_t>(busy_.size()) + 1},
                 {"us", std::vector<int64_t>(busy_.begin(), busy_.end())}};
    // The next record repeats the last window of this one.
    while (busy_.size() > window_) busy_.pop_front();
  }
  report_(s);
  last_ = Clock::now();
  steps_ = 0;
  step_seconds_ = wait_seconds_ = data_seconds_ = compute_seconds_ = 0;
  samples_ = 0;
}

}  // namespace cohort::train
