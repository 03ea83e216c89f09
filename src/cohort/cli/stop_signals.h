// The launcher's signals: Ctrl-C and SIGTERM ask the job to stop, and a child process's end wakes
// the launcher's loop at once instead of at its next tick (so that a lost worker's survivors
// re-form without waiting).
#pragma once

#include <chrono>

namespace cohort::cli {

// Installs the handlers (SIGINT, SIGTERM, SIGCHLD). Throws SystemError if the wake-up pipe cannot
// be made.
void handle_stop_signals();
// The stop signal received (SIGINT or SIGTERM), 0 while none has been.
int stop_signal();
// Sleeps until `timeout` passes, a child ends or a stop signal arrives.
void wait_for_event(std::chrono::milliseconds timeout);

}  // namespace cohort::cli
