// Child processes of the launcher: spawned with their own environment, killed with their parent
// (PR_SET_PDEATHSIG) unless asked not to be, and reaped without blocking.
// PR_SET_PDEATHSIG fires when the spawning *thread* exits: spawn from a thread that lives as long
// as the children should (the launcher spawns from its main thread).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace cohort::elastic {

struct ExitStatus {
  int code = 0;    // exit code when exited normally
  int signal = 0;  // terminating signal, 0 if exited normally
  bool ok() const { return signal == 0 && code == 0; }
  std::string describe() const;  // "exited with code 3" / "killed by signal 9 (SIGKILL)"
};

struct SpawnOptions {
  std::string executable;                  // path; "/proc/self/exe" for this binary
  std::vector<std::string> args;           // argv[1..]
  std::map<std::string, std::string> env;  // added to (and overriding) the parent's environment
  std::string stdout_path;                 // empty: inherit
  std::string stderr_path;                 // empty: inherit
  // Killed when the launcher dies (PR_SET_PDEATHSIG). Off for the workers of a job whose store
  // outlives the launcher (etcd): a standby coordinator takes them over.
  bool die_with_parent = true;
  // A descriptor the child keeps across exec, as its fd 3 (-1: none).
  int pass_fd = -1;
  // The CPUs the child is bound to before it runs its command (base/cpu_binding.h); empty: it
  // runs wherever this process may.
  std::vector<int> cpus;
};

class ChildProcess {
 public:
  ChildProcess() = default;
  static ChildProcess spawn(const SpawnOptions& options);
  // A process that another forked and that was re-parented to this one (a child subreaper):
  // waited for and signalled like one this process spawned.
  static ChildProcess adopt(pid_t pid, bool die_with_parent);
  // Terminates a child still running, unless it was spawned not to die with its parent.
  ~ChildProcess();
  ChildProcess(ChildProcess&& o) noexcept;
  ChildProcess& operator=(ChildProcess&& o) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0 && !status_; }
  // Non-blocking reap; returns the status once the child has exited.
  std::optional<ExitStatus> poll();
  // Blocks up to `timeout`; returns nullopt if still running.
  std::optional<ExitStatus> wait_for(std::chrono::milliseconds timeout);
  void signal(int sig);
  // Lets the child go: this object no longer signals, waits for or kills it.
  void release() {
    pid_ = -1;
    status_.reset();
  }
  // SIGTERM, then SIGKILL after `grace`; always reaps.
  ExitStatus terminate(std::chrono::milliseconds grace = std::chrono::seconds(5));

 private:
  pid_t pid_ = -1;
  std::optional<ExitStatus> status_;
  bool die_with_parent_ = true;  // false: going out of scope leaves the child running
};

// In a child between fork and exec (or a forked worker): SIGINT, SIGTERM and SIGPIPE back to their
// defaults and no signal blocked, whatever the parent had. Async-signal-safe.
void reset_signals_in_child();

// Path of the running executable (readlink /proc/self/exe).
std::string self_executable();

}  // namespace cohort::elastic
