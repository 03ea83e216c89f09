#include "cohort/trace/exchange_clock.h"

#include <algorithm>

namespace cohort::trace {

void ExchangeClock::waited(int64_t from_us, int64_t to_us) {
  std::lock_guard lk(mu_);
  waited_us_ += std::max<int64_t>(0, to_us - from_us);
  last_wait_from_us_ = std::max(last_wait_from_us_, from_us);
}

void ExchangeClock::future_issued(int64_t at_us) {
  std::lock_guard lk(mu_);
  last_issued_us_ = std::max(last_issued_us_, at_us);
}

void ExchangeClock::future_finished(int64_t at_us) {
  std::lock_guard lk(mu_);
  last_finished_us_ = std::max(last_finished_us_, at_us);
}

ExchangeClock::Interval ExchangeClock::take(int64_t end_us) {
  std::lock_guard lk(mu_);
  int64_t blocked = waited_us_;
  Interval out;
  if (last_issued_us_ > 0) {
    const int64_t until = std::min(last_finished_us_, end_us);
    blocked += std::max<int64_t>(0, until - last_issued_us_);
    out.ready_us = last_issued_us_;
  } else {
    out.ready_us = last_wait_from_us_ > 0 ? last_wait_from_us_ : end_us;
  }
  out.blocked_s = static_cast<double>(blocked) * 1e-6;
  waited_us_ = last_wait_from_us_ = last_issued_us_ = last_finished_us_ = 0;
  return out;
}

}  // namespace cohort::trace
