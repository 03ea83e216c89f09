#include "cohort/elastic/process.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include "cohort/base/cpu_binding.h"
#include "cohort/base/error.h"

extern char** environ;

namespace cohort::elastic {

std::string ExitStatus::describe() const {
  if (signal) {
    const char* name = sigabbrev_np(signal);
    return "killed by signal " + std::to_string(signal) +
           (name ? std::string(" (SIG") + name + ")" : "");
  }
  return "exited with code " + std::to_string(code);
}

namespace {

ExitStatus decode(int wstatus) {
  ExitStatus s;
  if (WIFEXITED(wstatus)) s.code = WEXITSTATUS(wstatus);
  if (WIFSIGNALED(wstatus)) s.signal = WTERMSIG(wstatus);
  return s;
}

}  // namespace

ChildProcess ChildProcess::spawn(const SpawnOptions& options) {
  // Everything the child needs is prepared before fork: after fork only async-signal-safe calls.
  std::vector<std::string> argv_s;
  argv_s.push_back(options.executable);
  argv_s.insert(argv_s.end(), options.args.begin(), options.args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);

  std::map<std::string, std::string> env_map;
  for (char** e = environ; *e; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string::npos) env_map[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : options.env) env_map[k] = v;
  std::vector<std::string> env_s;
  for (const auto& [k, v] : env_map) env_s.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);

  int out_fd = -1, err_fd = -1;
  if (!options.stdout_path.empty()) {
    out_fd = ::open(options.stdout_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (out_fd < 0) throw SystemError("open " + options.stdout_path, errno);
  }
  if (!options.stderr_path.empty()) {
    err_fd = ::open(options.stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (err_fd < 0) {
      if (out_fd >= 0) ::close(out_fd);
      throw SystemError("open " + options.stderr_path, errno);
    }
  }
  const CpuMask cpus(options.cpus);
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) throw SystemError("fork", errno);
  if (pid == 0) {
    // Die with the launcher, whatever kills it.
    if (options.die_with_parent) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
    }
    if (out_fd >= 0) ::dup2(out_fd, STDOUT_FILENO);
    if (err_fd >= 0) ::dup2(err_fd, STDERR_FILENO);
    if (options.pass_fd == 3) {
      ::fcntl(3, F_SETFD, 0);
    } else if (options.pass_fd >= 0) {
      ::dup2(options.pass_fd, 3);  // the copy does not close on exec
    }
    reset_signals_in_child();
    cpus.apply();  // an optimisation: a child the kernel does not bind runs unbound
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  if (out_fd >= 0) ::close(out_fd);
  if (err_fd >= 0) ::close(err_fd);
  ChildProcess c;
  c.pid_ = pid;
  c.die_with_parent_ = options.die_with_parent;
  return c;
}

ChildProcess ChildProcess::adopt(pid_t pid, bool die_with_parent) {
  ChildProcess c;
  c.pid_ = pid;
  c.die_with_parent_ = die_with_parent;
  return c;
}

ChildProcess::~ChildProcess() {
  if (running() && die_with_parent_) terminate(std::chrono::milliseconds(2000));
}

ChildProcess::ChildProcess(ChildProcess&& o) noexcept
    : pid_(o.pid_), status_(o.status_), die_with_parent_(o.die_with_parent_) {
  o.pid_ = -1;
  o.status_.reset();
}

ChildProcess& ChildProcess::operator=(ChildProcess&& o) noexcept {
  if (this != &o) {
    if (running()) terminate(std::chrono::milliseconds(2000));
    pid_ = o.pid_;
    status_ = o.status_;
    die_with_parent_ = o.die_with_parent_;
    o.pid_ = -1;
    o.status_.reset();
  }
  return *this;
}

std::optional<ExitStatus> ChildProcess::poll() {
  if (status_ || pid_ <= 0) return status_;
  int ws = 0;
  pid_t r = ::waitpid(pid_, &ws, WNOHANG);
  if (r == pid_) status_ = decode(ws);
  return status_;
}

std::optional<ExitStatus> ChildProcess::wait_for(std::chrono::milliseconds timeout) {
  auto end = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (auto s = poll()) return s;
    if (std::chrono::steady_clock::now() >= end) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void ChildProcess::signal(int sig) {
  if (running()) ::kill(pid_, sig);
}

ExitStatus ChildProcess::terminate(std::chrono::milliseconds grace) {
  if (!running()) return status_.value_or(ExitStatus{});
  ::kill(pid_, SIGCONT);  // a stopped child cannot act on SIGTERM
  ::kill(pid_, SIGTERM);
  if (auto s = wait_for(grace)) return *s;
  ::kill(pid_, SIGKILL);
  int ws = 0;
  while (::waitpid(pid_, &ws, 0) < 0 && errno == EINTR) {
  }
  status_ = decode(ws);
  return *status_;
}

void reset_signals_in_child() {
  ::signal(SIGINT, SIG_DFL);
  ::signal(SIGTERM, SIG_DFL);
  ::signal(SIGPIPE, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
}

std::string self_executable() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n < 0) throw SystemError("readlink /proc/self/exe", errno);
  buf[n] = 0;
  return buf;
}

}  // namespace cohort::elastic
