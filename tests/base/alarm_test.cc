// Alarm: a ring or a set time ends a sleep, across threads, and neither is lost when it comes
// before the sleep starts.
#include "cohort/base/alarm.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace cohort {
namespace {

using std::chrono::milliseconds;

Clock::duration time_asleep(Alarm& alarm) {
  const auto t0 = Clock::now();
  alarm.sleep();
  return Clock::now() - t0;
}

TEST(Alarm, ARingFromAnotherThreadEndsTheSleep) {
  Alarm alarm;
  std::thread ringer([&] {
    std::this_thread::sleep_for(milliseconds(50));
    alarm.ring();
  });
  EXPECT_LT(time_asleep(alarm), std::chrono::seconds(5));
  ringer.join();
}

TEST(Alarm, ARingBeforeTheSleepIsNotLostAndIsUsedUp) {
  Alarm alarm;
  alarm.ring();
  alarm.ring();
  EXPECT_LT(time_asleep(alarm), milliseconds(500));
  // Both rings were one wake-up: the next sleep lasts until the next event.
  alarm.set_by(Clock::now() + milliseconds(100));
  EXPECT_GE(time_asleep(alarm), milliseconds(90));
}

TEST(Alarm, TheTimeSetEndsTheSleepThenAndNotBefore) {
  Alarm alarm;
  const auto at = Clock::now() + milliseconds(100);
  alarm.set_by(at);
  alarm.sleep();
  EXPECT_GE(Clock::now(), at);
  EXPECT_LT(Clock::now(), at + std::chrono::seconds(5));
}

TEST(Alarm, ATimePassedEndsTheSleepAtOnce) {
  Alarm alarm;
  alarm.set_by(Clock::now() - milliseconds(10));
  EXPECT_LT(time_asleep(alarm), milliseconds(500));
  alarm.set_by(Clock::time_point{});  // the clock's epoch: long passed, not "disarmed"
  EXPECT_LT(time_asleep(alarm), milliseconds(500));
}

TEST(Alarm, AnEarlierTimeStillToComeIsKeptALaterOneIsNot) {
  Alarm alarm;
  const auto early = Clock::now() + milliseconds(100);
  alarm.set_by(early);
  alarm.set_by(early + std::chrono::seconds(30));  // kept: the earlier time
  alarm.sleep();
  EXPECT_LT(Clock::now(), early + std::chrono::seconds(5));
  // Once that time has passed, a later one is set.
  const auto later = Clock::now() + milliseconds(100);
  alarm.set_by(later);
  alarm.sleep();
  EXPECT_GE(Clock::now(), later);
}

}  // namespace
}  // namespace cohort
