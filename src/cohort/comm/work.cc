#include "cohort/comm/work.h"

#include "cohort/base/error.h"

namespace cohort::comm {

void Work::wait() {
  if (runner_ && !is_completed()) runner_->run_until(*this, std::chrono::milliseconds::max());
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

void Work::wait(std::chrono::milliseconds timeout) {
  if (runner_ && !is_completed()) runner_->run_until(*this, timeout);
  std::unique_lock lk(mu_);
  if (!cv_.wait_for(lk, timeout, [&] { return done_; })) {
    throw TimeoutError(name_ + " #" + std::to_string(seq_) + " did not complete within " +
                       std::to_string(timeout.count()) + " ms");
  }
  if (error_) std::rethrow_exception(error_);
}

bool Work::is_completed() const {
  std::lock_guard lk(mu_);
  return done_;
}

bool Work::failed() const {
  std::lock_guard lk(mu_);
  return done_ && error_ != nullptr;
}

void Work::finish() {
  {
    std::lock_guard lk(mu_);
    done_ = true;
  }
  cv_.notify_all();
}

void Work::fail(std::exception_ptr e) {
  {
    std::lock_guard lk(mu_);
    error_ = std::move(e);
    done_ = true;
  }
  cv_.notify_all();
}

}  // namespace cohort::comm
