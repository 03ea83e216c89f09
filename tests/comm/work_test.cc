// Work::then: the completion callback a torch.distributed future hangs on an operation.
#include "cohort/comm/work.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>

#include "cohort/base/error.h"

namespace cohort::comm {
namespace {

TEST(WorkThen, RunsOnTheCompletingThreadBeforeWaitReturns) {
  Work work("allreduce", 7);
  std::atomic<bool> ran{false};
  std::thread::id ran_on;
  work.then([&](std::exception_ptr e) {
    EXPECT_EQ(e, nullptr);
    ran_on = std::this_thread::get_id();
    ran = true;
  });
  std::thread completer([&] { work.finish(); });
  std::thread::id completer_id = completer.get_id();
  work.wait();
  // wait() returned: the callback has run (it runs before the operation counts as done).
  EXPECT_TRUE(ran.load());
  completer.join();
  EXPECT_EQ(ran_on, completer_id);
}

TEST(WorkThen, RunsAtOnceWhenAlreadyCompletedAndSeesTheError) {
  Work work("broadcast", 3);
  work.fail(std::make_exception_ptr(PeerLostError(1, "rank 1 lost")));
  std::string seen;
  work.then([&](std::exception_ptr e) {
    try {
      std::rethrow_exception(e);
    } catch (const PeerLostError& err) {
      seen = err.what();
    }
  });
  EXPECT_EQ(seen, "rank 1 lost");
  EXPECT_THROW(work.wait(), PeerLostError);
}

TEST(WorkThen, ASecondCallbackIsRefused) {
  Work work("barrier", 1);
  work.then([](std::exception_ptr) {});
  EXPECT_THROW(work.then([](std::exception_ptr) {}), ProtocolError);
  work.finish();
}

}  // namespace
}  // namespace cohort::comm
