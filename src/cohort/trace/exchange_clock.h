// ExchangeClock: how long a training loop that Cohort does not drive (a Python script on the
// cohort backend) sat blocked on its collectives between two of its reports, for the job's step
// log (step_log.h) and `cohort diagnose`.
//
// Two ways of waiting are told apart:
//   - wait() on an operation's handle (every synchronous torch.distributed call, and an async
//     one waited on explicitly): the calling thread is blocked for exactly that span;
//   - an operation whose result is taken through its future (DDP's gradient buckets, a
//     communication hook's): DDP issues the last bucket when backward has produced every gradient
//     and then waits for all of them, so the step is blocked from the last such issue until the
//     last such operation finished. That issue is the step's ready time (its gradients were all
//     in), which `cohort diagnose` compares across ranks to split waiting for peers from
//     communicating.
// The recording calls come from any thread; take() from the thread that reports.
#pragma once

#include <cstdint>
#include <mutex>

namespace cohort::trace {

class ExchangeClock {
 public:
  void waited(int64_t from_us, int64_t to_us);
  void future_issued(int64_t at_us);
  void future_finished(int64_t at_us);

  struct Interval {
    double blocked_s = 0;  // waits, plus the futures' span after the last issue
    int64_t ready_us = 0;  // the last future's issue; else the last wait's start; else the end
  };
  // What was recorded since the previous take(), for a step that ended at `end_us` (what lies
  // beyond it is cut off); starts the next interval.
  Interval take(int64_t end_us);

 private:
  std::mutex mu_;
  int64_t waited_us_ = 0;
  int64_t last_wait_from_us_ = 0;
  int64_t last_issued_us_ = 0;
  int64_t last_finished_us_ = 0;
};

}  // namespace cohort::trace
