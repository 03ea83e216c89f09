#include "cohort/base/alarm.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <type_traits>

#include "cohort/base/error.h"

namespace cohort {

Alarm::Alarm() {
  event_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (event_fd_ < 0) throw SystemError("eventfd", errno);
  timer_fd_ = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (timer_fd_ < 0) {
    const int err = errno;
    ::close(event_fd_);
    throw SystemError("timerfd_create", err);
  }
}

Alarm::~Alarm() {
  ::close(event_fd_);
  ::close(timer_fd_);
}

void Alarm::ring() {
  const uint64_t one = 1;
  // Fails only if the counter would overflow, and then a wake-up is pending anyway.
  [[maybe_unused]] ssize_t n = ::write(event_fd_, &one, sizeof(one));
}

void Alarm::set_by(Clock::time_point at, Clock::time_point now) {
  if (set_ <= at && set_ > now) return;
  static_assert(std::is_same_v<Clock, std::chrono::steady_clock>,
                "the timer counts on CLOCK_MONOTONIC, which is steady_clock's clock on Linux");
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(at.time_since_epoch());
  itimerspec spec{};
  // An all-zero it_value would disarm the timer instead of firing it: a time already passed
  // fires at the earliest representable instant.
  if (ns.count() <= 0) {
    spec.it_value.tv_nsec = 1;
  } else {
    spec.it_value.tv_sec = static_cast<time_t>(ns.count() / 1'000'000'000);
    spec.it_value.tv_nsec = static_cast<long>(ns.count() % 1'000'000'000);
  }
  if (::timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &spec, nullptr) != 0) {
    throw SystemError("timerfd_settime", errno);
  }
  set_ = at;
}

void Alarm::sleep() {
  pollfd fds[2] = {{event_fd_, POLLIN, 0}, {timer_fd_, POLLIN, 0}};
  while (::poll(fds, 2, -1) < 0) {
    if (errno != EINTR) throw SystemError("poll", errno);
  }
  uint64_t count;
  for (const pollfd& p : fds) {
    if (p.revents & POLLIN) {
      [[maybe_unused]] ssize_t n = ::read(p.fd, &count, sizeof(count));
    }
  }
}

}  // namespace cohort
