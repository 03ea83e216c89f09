// A thread's sleep that other threads end either now (ring) or at a set time (set_at), the latter
// without waking anyone until then: an eventfd and a CLOCK_MONOTONIC timerfd (the clock of
// cohort::Clock) polled together. Arming the timer is one system call on the arming thread and no
// context switch, which is what lets a caller hand work to a sleeping thread "unless I take it
// first" without paying for a thread wake-up when it does take it.
//
// Both descriptors are level-triggered: a ring or an expiry between the sleeper's last look at
// its state and its call to sleep() makes sleep() return at once, so no wake-up is ever lost.
#pragma once

#include "cohort/base/clock.h"

namespace cohort {

class Alarm {
 public:
  Alarm();
  ~Alarm();
  Alarm(const Alarm&) = delete;
  Alarm& operator=(const Alarm&) = delete;

  // Ends the current or next sleep() now.
  void ring();
  // Ends the current or next sleep() no later than `at` (at once if `at` has passed). A time set
  // earlier that is still to come and not later than `at` is kept (no system call): the sleeper
  // then returns early, looks at its state and sets the alarm again. Callers of set_by serialise
  // among themselves (a lock of theirs); ring and sleep may run concurrently with it.
  void set_by(Clock::time_point at) { set_by(at, Clock::now()); }
  // The same, for a caller that has just read the clock (`now`), under the lock that serialises
  // the callers: a `now` read before another caller's time passed could keep a time already gone.
  void set_by(Clock::time_point at, Clock::time_point now);
  // Sleeps until rung or until the time set passes, and clears both. May return spuriously.
  void sleep();

 private:
  int event_fd_ = -1;
  int timer_fd_ = -1;
  Clock::time_point set_{};  // the time the timer was last set to
};

}  // namespace cohort
