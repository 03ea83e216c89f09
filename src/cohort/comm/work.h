// Work: the handle of one asynchronous operation. The exception raised on the communication
// thread is captured and rethrown by wait() on the caller's thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>

namespace cohort::comm {

class Work {
 public:
  Work(std::string name, uint64_t seq) : name_(std::move(name)), seq_(seq) {}

  // Blocks until the operation completes and rethrows its error. With a timeout, throws
  // TimeoutError naming the operation if it has not completed by then (the operation itself is
  // not cancelled; its own deadline still applies).
  void wait();
  void wait(std::chrono::milliseconds timeout);
  bool is_completed() const;
  // True if completed with an error.
  bool failed() const;
  const std::string& name() const { return name_; }
  uint64_t sequence() const { return seq_; }

  // Called by the communication thread.
  void finish();
  void fail(std::exception_ptr e);

 private:
  std::string name_;
  uint64_t seq_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

}  // namespace cohort::comm
