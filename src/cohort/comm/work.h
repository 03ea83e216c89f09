// Work: the handle of one asynchronous operation. The exception raised on the communication
// thread is captured and rethrown by wait() on the caller's thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

namespace cohort::comm {

class Work;

// Runs queued operations up to and including `work` on the calling thread, if none of them has
// been started elsewhere yet and they are sure to end (their deadlines and failure handling
// included) within `limit`; returns at once otherwise.
class WorkRunner {
 public:
  virtual ~WorkRunner() = default;
  virtual void run_until(const Work& work, std::chrono::milliseconds limit) = 0;
};

class Work {
 public:
  Work(std::string name, uint64_t seq, std::shared_ptr<WorkRunner> runner = nullptr)
      : name_(std::move(name)), seq_(seq), runner_(std::move(runner)) {}

  // Blocks until the operation completes and rethrows its error. If neither it nor an operation
  // queued before it has started, wait() runs them on the calling thread (through the runner)
  // instead of sleeping until the communication thread has: that saves a wake-up of each thread,
  // most of the latency of a small collective. With a timeout, throws TimeoutError naming the
  // operation if it has not completed by then (the operation itself is not cancelled; its own
  // deadline still applies); it runs the operation itself only if that is sure to end in time.
  void wait();
  void wait(std::chrono::milliseconds timeout);
  bool is_completed() const;
  // True if completed with an error.
  bool failed() const;
  const std::string& name() const { return name_; }
  uint64_t sequence() const { return seq_; }
  // Runs `done` once when the operation completes, with its error (null on success): on the
  // thread that completes it, before wait() returns anywhere, or at once on this thread if it
  // has completed already. One callback per operation (ProtocolError on a second); it must not
  // throw, and must not wait on this operation. A communicator runs its collectives one at a time
  // in the order they were issued, and a collective's callback ends before the next one starts:
  // issue A, A.then(f), issue B, and B runs on what f wrote (a chain of collectives whose inputs
  // come from the results before them, computed without the caller waiting).
  void then(std::function<void(std::exception_ptr)> done);

  // Called by the communication thread.
  void finish();
  void fail(std::exception_ptr e);

 private:
  void complete(std::exception_ptr e);

  std::string name_;
  uint64_t seq_;
  const std::shared_ptr<WorkRunner> runner_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  bool completing_ = false;  // the callback has been taken and runs; done_ follows
  std::exception_ptr error_;
  std::function<void(std::exception_ptr)> then_;
};

}  // namespace cohort::comm
