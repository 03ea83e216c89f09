#include "cohort/dist/work.h"

#include <ATen/core/jit_type.h>

#include <mutex>

#include "cohort/comm/flight_recorder.h"
#include "cohort/comm/types.h"

namespace cohort::dist {

namespace {

// A collective's timeout, its message naming the hang report written for it; any other error as
// it is.
std::exception_ptr with_hang_report(std::exception_ptr e, HangReports& hangs) {
  try {
    std::rethrow_exception(e);
  } catch (const comm::CollectiveTimeoutError& t) {
    const std::string path = hangs.on_timeout(t.what());
    if (path.empty()) return e;
    return std::make_exception_ptr(
        comm::CollectiveTimeoutError(t.collective(), t.sequence(), t.missing_ranks(),
                                     std::string(t.what()) + " (hang report: " + path + ")"));
  } catch (...) {
    return e;
  }
}

struct Deferred {
  std::mutex mu;
  std::vector<std::shared_ptr<void>> items;
};

// Never destroyed: what is left at exit must not be freed after the interpreter has gone.
Deferred& deferred() {
  static auto* d = new Deferred;
  return *d;
}

}  // namespace

void defer_release(std::shared_ptr<void> what) {
  Deferred& d = deferred();
  std::lock_guard lk(d.mu);
  d.items.push_back(std::move(what));
}

void release_deferred() {
  std::vector<std::shared_ptr<void>> items;
  {
    Deferred& d = deferred();
    std::lock_guard lk(d.mu);
    items.swap(d.items);
  }  // dropped here, on this thread
}

CohortWork::CohortWork(int rank, c10d::OpType type, std::shared_ptr<comm::Work> work,
                       std::vector<at::Tensor> outputs, std::vector<at::Tensor> keep,
                       std::function<void()> finish, std::shared_ptr<HangReports> hangs,
                       std::shared_ptr<trace::ExchangeClock> clock)
    : c10d::Work(rank, type), work_(std::move(work)), state_(std::make_shared<State>()) {
  state_->clock = std::move(clock);
  state_->issued_us = comm::now_us();
  state_->outputs = std::move(outputs);
  state_->keep = std::move(keep);
  state_->finish = std::move(finish);
  state_->future =
      c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
  // The callback owns the state, not this handle: the operation may outlive it (a caller that
  // drops an async handle).
  work_->then([state = state_, hangs = std::move(hangs)](std::exception_ptr e) mutable {
    if (e && hangs) e = with_hang_report(e, *hangs);
    if (!e && state->finish) {
      try {
        state->finish();
      } catch (...) {
        e = std::current_exception();
      }
    }
    state->error = e;
    if (state->clock) {
      // Either this or getFuture() (or both) sees the other's store.
      state->finished_us = comm::now_us();
      if (state->future_taken) state->clock->future_finished(state->finished_us);
    }
    if (e) {
      state->future->setError(e);
    } else {
      state->future->markCompleted(c10::IValue(state->outputs));
    }
    // The state holds tensors (outputs, keep, finish's): not to be dropped on this thread.
    defer_release(std::move(state));
  });
}

// The future completes last (after finish and the error are in place) but before the comm::Work
// counts as done: whoever saw the future complete must see the operation completed too.
bool CohortWork::isCompleted() {
  return state_->future->completed();
}

bool CohortWork::isSuccess() const {
  return state_->future->completed() && !state_->error;
}

std::exception_ptr CohortWork::exception() const {
  return state_->future->completed() ? state_->error : nullptr;
}

std::vector<at::Tensor> CohortWork::result() {
  return state_->outputs;
}

bool CohortWork::wait(std::chrono::milliseconds timeout) {
  struct Blocked {
    trace::ExchangeClock* clock;
    int64_t from_us = comm::now_us();
    ~Blocked() {
      if (clock) clock->waited(from_us, comm::now_us());
    }
  } blocked{state_->clock.get()};
  try {
    if (timeout.count() > 0) {
      work_->wait(timeout);
    } else {
      work_->wait();
    }
  } catch (...) {
    // The operation's error as the completion callback left it (a timeout naming its hang
    // report); a wait that gave up before the operation ended has none yet.
    if (work_->is_completed() && state_->error) std::rethrow_exception(state_->error);
    throw;
  }
  release_deferred();
  if (state_->error) std::rethrow_exception(state_->error);
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> CohortWork::getFuture() {
  if (state_->clock && !state_->future_taken.exchange(true)) {
    state_->clock->future_issued(state_->issued_us);
    if (const int64_t done = state_->finished_us; done > 0) state_->clock->future_finished(done);
  }
  return state_->future;
}

}  // namespace cohort::dist
