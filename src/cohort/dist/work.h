// The handle torch.distributed gets for one Cohort operation: c10d::Work over comm::Work, with the
// future DDP's communication hooks chain on. The future completes on the thread that completes the
// operation, after `finish` (copying results out of a temporary buffer) has run; wait() runs the
// operation on the caller's thread where Cohort can (comm::Work::wait), so a collective waited on
// at once costs no thread wake-up.
#pragma once

#include <ATen/core/ivalue.h>

#include <atomic>
#include <functional>
#include <memory>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "cohort/comm/work.h"
#include "cohort/dist/hang_reports.h"
#include "cohort/trace/exchange_clock.h"

namespace cohort::dist {

// Tensors that Python has seen free their Python object when they go, which takes the GIL. The
// communication thread must never be the one that lets them go: a thread that holds the GIL while
// it joins that thread (a group destroyed from Python, or at interpreter exit) would wait for it
// forever. So what an operation's completion lets go of is handed here and dropped by the next
// caller of release_deferred(): a thread that issues or waits for an operation, or destroys its
// group.
void defer_release(std::shared_ptr<void> what);
void release_deferred();

class CohortWork final : public c10d::Work {
 public:
  // `outputs` are what result() and the future hold; `keep` lives until the operation completes
  // (inputs and temporary buffers it reads or writes); `finish` runs once on success, before the
  // operation counts as completed.
  // A timeout of the operation writes a hang report through `hangs` (when given), whose path the
  // error's message then names. `clock` (when given) is told how long the caller was blocked on
  // the operation: a wait() as it happens, a future taken as issued and finished.
  CohortWork(int rank, c10d::OpType type, std::shared_ptr<comm::Work> work,
             std::vector<at::Tensor> outputs, std::vector<at::Tensor> keep = {},
             std::function<void()> finish = nullptr, std::shared_ptr<HangReports> hangs = nullptr,
             std::shared_ptr<trace::ExchangeClock> clock = nullptr);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  // Throws the operation's error. A timeout of zero or less: none but the operation's own deadline.
  bool wait(std::chrono::milliseconds timeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  struct State {
    std::vector<at::Tensor> outputs;
    std::vector<at::Tensor> keep;
    std::function<void()> finish;
    c10::intrusive_ptr<c10::ivalue::Future> future;
    std::exception_ptr error;  // the operation's, or finish()'s
    std::shared_ptr<trace::ExchangeClock> clock;
    int64_t issued_us = 0;
    std::atomic<int64_t> finished_us{0};
    std::atomic<bool> future_taken{false};
  };

  std::shared_ptr<comm::Work> work_;
  std::shared_ptr<State> state_;
};

}  // namespace cohort::dist
