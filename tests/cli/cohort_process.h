// Runs the real `cohort` binary as a child process for the CLI and fault tests.
//
// The child gets its own process group, so that the test can signal the launcher and every rank
// it spawned at once, and the test process makes itself a child subreaper, so that ranks orphaned
// by a killed launcher are reparented here and can be waited for (proving they died) instead of
// disappearing into init. The destructor continues and kills the whole group and reaps it: no
// test leaves a process behind, even when an assertion fails half-way.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace cohort::testing {

using namespace std::chrono_literals;

inline std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Pids of the live (or zombie) processes in process group `pgid`, from /proc.
inline std::vector<pid_t> group_members(pid_t pgid) {
  std::vector<pid_t> out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    std::string stat = read_file("/proc/" + std::string(e->d_name) + "/stat");
    auto paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream rest(stat.substr(paren + 2));
    char state = 0;
    long ppid = 0, pgrp = 0;
    rest >> state >> ppid >> pgrp;
    if (pgrp == pgid) out.push_back(static_cast<pid_t>(pid));
  }
  closedir(d);
  return out;
}

class CohortProcess {
 public:
  // `args` excludes the binary. `env_drop` names variables removed from the child's environment.
  explicit CohortProcess(std::vector<std::string> args, std::vector<std::string> env_drop = {}) {
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    char out_tmpl[] = "/tmp/cohort-cli-test-out-XXXXXX";
    char err_tmpl[] = "/tmp/cohort-cli-test-err-XXXXXX";
    int out_fd = mkstemp(out_tmpl);
    int err_fd = mkstemp(err_tmpl);
    out_path_ = out_tmpl;
    err_path_ = err_tmpl;

    args.insert(args.begin(), COHORT_BINARY);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    start_ = std::chrono::steady_clock::now();
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      for (const auto& v : env_drop) unsetenv(v.c_str());
      dup2(out_fd, STDOUT_FILENO);
      dup2(err_fd, STDERR_FILENO);
      execv(COHORT_BINARY, argv.data());
      _exit(127);
    }
    setpgid(pid_, pid_);  // also here, so that the group exists before either side runs on
    close(out_fd);
    close(err_fd);
  }

  ~CohortProcess() {
    if (pid_ > 0) {
      kill(-pid_, SIGCONT);
      kill(-pid_, SIGKILL);
      reap_group(10s);
    }
    unlink(out_path_.c_str());
    unlink(err_path_.c_str());
  }

  pid_t pid() const { return pid_; }

  // Waits for the launcher to exit; nullopt if it has not by then.
  std::optional<int> wait_for(std::chrono::milliseconds limit) {
    if (status_) return status_;
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        status_ = st;
        elapsed_ = std::chrono::steady_clock::now() - start_;
        return status_;
      }
      std::this_thread::sleep_for(10ms);
    }
    return std::nullopt;
  }

  // Reaps whatever of the group was reparented here and reports whether the group is empty
  // (no live process and no zombie) within the limit.
  bool reap_group(std::chrono::milliseconds limit) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (true) {
      while (waitpid(-pid_, nullptr, WNOHANG) > 0) {
      }
      if (group_members(pid_).empty()) return true;
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(10ms);
    }
  }

  // Waits until the group holds at least n processes (launcher + ranks).
  bool wait_for_members(size_t n, std::chrono::milliseconds limit) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      if (group_members(pid_).size() >= n) return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }

  // Waits until the launcher's standard output holds `text`.
  bool wait_for_output(const std::string& text, std::chrono::milliseconds limit) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      if (out().find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }

  std::string out() const { return read_file(out_path_); }
  std::string err() const { return read_file(err_path_); }
  double seconds() const { return std::chrono::duration<double>(elapsed_).count(); }

 private:
  pid_t pid_ = -1;
  std::string out_path_, err_path_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::duration elapsed_{};
  std::optional<int> status_;
};

inline bool exited_with(const std::optional<int>& st, int code) {
  return st && WIFEXITED(*st) && WEXITSTATUS(*st) == code;
}

}  // namespace cohort::testing
