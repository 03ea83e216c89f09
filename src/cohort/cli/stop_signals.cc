#include "cohort/cli/stop_signals.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "cohort/base/error.h"

namespace cohort::cli {
namespace {

std::atomic<int> g_stop_signal{0};
// Written (a byte) when a child process ends or a stop signal arrives.
int g_wake_pipe[2] = {-1, -1};

void wake_loop() {
  const char b = 0;
  [[maybe_unused]] auto n = ::write(g_wake_pipe[1], &b, 1);
}

void on_stop_signal(int sig) {
  g_stop_signal = sig;
  wake_loop();
}

void on_child_exit(int) {
  const int saved = errno;
  wake_loop();
  errno = saved;
}

}  // namespace

void handle_stop_signals() {
  if (g_wake_pipe[0] < 0 && ::pipe2(g_wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    throw SystemError("pipe", errno);
  }
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  struct sigaction child {};
  child.sa_handler = on_child_exit;
  child.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigemptyset(&child.sa_mask);
  sigaction(SIGCHLD, &child, nullptr);
}

int stop_signal() {
  return g_stop_signal.load();
}

void wait_for_event(std::chrono::milliseconds timeout) {
  pollfd p{g_wake_pipe[0], POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(timeout.count())) > 0) {
    char buf[64];
    while (::read(g_wake_pipe[0], buf, sizeof(buf)) > 0) {
    }
  }
}

}  // namespace cohort::cli
