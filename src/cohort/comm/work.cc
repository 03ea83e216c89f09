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
  // Done already (most often: run_until ran it here): no deadline to compute.
  if (!done_ && !cv_.wait_for(lk, timeout, [&] { return done_; })) {
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

void Work::then(std::function<void(std::exception_ptr)> done) {
  std::exception_ptr error;
  {
    std::unique_lock lk(mu_);
    if (then_) throw ProtocolError(name_ + " #" + std::to_string(seq_) + " already has a callback");
    if (!done_ && !completing_) {
      then_ = std::move(done);
      return;
    }
    cv_.wait(lk, [&] { return done_; });
    error = error_;
  }
  done(error);
}

void Work::finish() {
  complete(nullptr);
}

void Work::fail(std::exception_ptr e) {
  complete(std::move(e));
}

void Work::complete(std::exception_ptr e) {
  std::function<void(std::exception_ptr)> done;
  {
    std::lock_guard lk(mu_);
    completing_ = true;
    done.swap(then_);
    if (!done) {  // no callback to run first: done at once, under this one lock
      error_ = std::move(e);
      done_ = true;
    }
  }
  if (done) {
    done(e);
    std::lock_guard lk(mu_);
    error_ = std::move(e);
    done_ = true;
  }
  cv_.notify_all();
}

}  // namespace cohort::comm
