// Clocks and deadlines. Every blocking wait in Cohort takes a Deadline, never an open-ended wait.
#pragma once

#include <algorithm>
#include <chrono>

namespace cohort {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

class Deadline {
 public:
  static Deadline after(Clock::duration d) { return Deadline(Clock::now() + d); }
  static Deadline never() { return Deadline(Clock::time_point::max()); }
  explicit Deadline(Clock::time_point at) : at_(at) {}

  Clock::time_point at() const { return at_; }
  bool expired() const { return Clock::now() >= at_; }
  bool is_never() const { return at_ == Clock::time_point::max(); }

  // Time left, clamped at zero.
  Millis remaining() const {
    if (is_never()) return Millis::max();
    auto left = std::chrono::duration_cast<Millis>(at_ - Clock::now());
    return std::max(left, Millis(0));
  }
  // Milliseconds left as a poll(2) timeout: -1 for never, at least 0 otherwise.
  int poll_timeout_ms() const {
    if (is_never()) return -1;
    auto ms = remaining().count();
    return static_cast<int>(std::min<long long>(ms + (expired() ? 0 : 1), 1 << 30));
  }
  Deadline earlier(const Deadline& other) const { return at_ <= other.at_ ? *this : other; }
  Deadline later(const Deadline& other) const { return at_ >= other.at_ ? *this : other; }

 private:
  Clock::time_point at_;
};

// Seconds from `t` to now.
inline double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Seconds since the Unix epoch, for logs and event files.
inline double wall_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

}  // namespace cohort
