// A latency histogram with fixed, logarithmically spaced upper bounds (Prometheus "le" buckets):
// cheap to update on a hot path and small enough to publish as JSON, and two of them (two ranks)
// add up bucket by bucket.
#pragma once

#include <array>
#include <cstdint>

namespace cohort {

class LatencyHistogram {
 public:
  // Upper bounds in seconds: 100 us .. 10 s, three per decade; the last bucket is +Inf.
  static constexpr std::array<double, 16> kBounds = {1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3,
                                                     1e-2, 2.5e-2, 5e-2, 1e-1, 2.5e-1, 5e-1,
                                                     1.0,  2.5,    5.0,  10.0};
  static constexpr size_t kBuckets = kBounds.size() + 1;

  void observe(double seconds) {
    size_t i = 0;
    while (i < kBounds.size() && seconds > kBounds[i]) ++i;
    ++counts_[i];
    sum_ += seconds;
    ++count_;
  }

  // Count of observations in bucket i alone (not cumulative); i == kBounds.size() is +Inf.
  uint64_t bucket(size_t i) const { return counts_[i]; }
  void add_to_bucket(size_t i, uint64_t n) {
    counts_[i] += n;
    count_ += n;
  }
  void add_sum(double s) { sum_ += s; }
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::array<uint64_t, kBuckets> counts_{};
  double sum_ = 0;
  uint64_t count_ = 0;
};

}  // namespace cohort
