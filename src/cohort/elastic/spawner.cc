#include "cohort/elastic/spawner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <thread>
#include <variant>

#include "cohort/base/clock.h"
#include "cohort/base/cpu_binding.h"
#include "cohort/base/error.h"

namespace cohort::elastic {

using json = nlohmann::json;

namespace {

constexpr const char* kFdVariable = "COHORT_SPAWNER_FD";
constexpr size_t kMaxMessage = 1 << 20;
constexpr auto kAnswerTimeout = std::chrono::seconds(30);

// One SOCK_SEQPACKET message, whole; "" at the end of the channel.
std::string receive(int fd) {
  std::string buf(kMaxMessage, '\0');
  for (;;) {
    const ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
    if (n >= 0) {
      buf.resize(static_cast<size_t>(n));
      return buf;
    }
    if (errno != EINTR) throw SystemError("spawner: recv", errno);
  }
}

void send_message(int fd, const std::string& msg) {
  for (;;) {
    if (::send(fd, msg.data(), msg.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(msg.size())) {
      return;
    }
    if (errno != EINTR) throw SystemError("spawner: send", errno);
  }
}

// In the forked worker: what ChildProcess::spawn does between fork and exec, then its command.
std::vector<std::string> become_worker(const json& q, pid_t launcher) {
  if (q.at("die_with_parent").get<bool>()) {
    // The intermediate process exits at once and the launcher adopts this one: only then is the
    // launcher the parent whose death PR_SET_PDEATHSIG is about.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (::getppid() != launcher && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != launcher) ::_exit(127);
  }
  for (const char* which : {"stdout", "stderr"}) {
    const std::string path = q.at(which).get<std::string>();
    if (path.empty()) continue;
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) ::_exit(127);
    ::dup2(fd, std::string(which) == "stdout" ? STDOUT_FILENO : STDERR_FILENO);
    ::close(fd);
  }
  for (const auto& [k, v] : q.at("env").items())
    ::setenv(k.c_str(), v.get<std::string>().c_str(), 1);
  ::unsetenv(kFdVariable);
  reset_signals_in_child();
  if (q.contains("cpus")) CpuMask(q.at("cpus").get<std::vector<int>>()).apply();
  std::vector<std::string> args = q.at("args").get<std::vector<std::string>>();
  if (!args.empty()) ::prctl(PR_SET_NAME, ("cohort " + args.front()).c_str());
  return args;
}

// Forks the worker through an intermediate process; returns its pid (or -errno) in the spawner,
// and the worker's command line in the worker.
std::variant<pid_t, std::vector<std::string>> fork_worker(int channel, const json& q) {
  const pid_t launcher = ::getppid();
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return -errno;
  const pid_t mid = ::fork();
  if (mid < 0) {
    const int e = errno;
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    return -e;
  }
  if (mid == 0) {
    ::close(pipe_fds[0]);
    const pid_t worker = ::fork();
    if (worker == 0) {
      ::close(pipe_fds[1]);
      ::close(channel);
      return become_worker(q, launcher);
    }
    const pid_t said = worker < 0 ? -errno : worker;
    (void)!::write(pipe_fds[1], &said, sizeof said);
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  int st = 0;
  while (::waitpid(mid, &st, 0) < 0 && errno == EINTR) {
  }
  pid_t worker = -EIO;
  if (::read(pipe_fds[0], &worker, sizeof worker) != sizeof worker) worker = -EIO;
  ::close(pipe_fds[0]);
  return worker;
}

}  // namespace

std::unique_ptr<Spawner> Spawner::start(const std::string& executable,
                                        const std::map<std::string, std::string>& env) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0) {
    throw SystemError("spawner: socketpair", errno);
  }
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    const int e = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    throw SystemError("spawner: PR_SET_CHILD_SUBREAPER", e);
  }
  SpawnOptions o{.executable = executable, .args = {"spawner"}, .env = env, .pass_fd = fds[1]};
  o.env[kFdVariable] = "3";
  ChildProcess server;
  try {
    server = ChildProcess::spawn(o);
  } catch (...) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw;
  }
  ::close(fds[1]);
  return std::unique_ptr<Spawner>(new Spawner(fds[0], std::move(server), executable));
}

Spawner::Spawner(int fd, ChildProcess server, std::string executable)
    : fd_(fd), server_(std::move(server)), executable_(std::move(executable)) {}

Spawner::~Spawner() {
  ::close(fd_);  // the spawner sees the end of its channel and exits
  if (!server_.wait_for(std::chrono::seconds(2))) server_.terminate(std::chrono::seconds(1));
}

ChildProcess Spawner::spawn(const SpawnOptions& options) {
  if (options.executable != executable_) {
    throw Error("spawner: forks " + executable_ + " only, not " + options.executable);
  }
  const json q = {{"args", options.args},
                  {"env", options.env},
                  {"stdout", options.stdout_path},
                  {"stderr", options.stderr_path},
                  {"die_with_parent", options.die_with_parent},
                  {"cpus", options.cpus}};
  std::lock_guard lock(mu_);
  send_message(fd_, q.dump());
  // A signal to this process (SIGCHLD of another worker, SIGINT) interrupts the wait, not the
  // spawn: it goes on waiting for the answer, or the spawner's worker would be started twice.
  const Deadline until = Deadline::after(kAnswerTimeout);
  int ready = 0;
  do {
    pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
    ready = ::poll(&p, 1, until.poll_timeout_ms());
  } while (ready < 0 && errno == EINTR && !until.expired());
  if (ready <= 0) {
    throw Error("spawner (pid " + std::to_string(server_.pid()) + ") did not answer within " +
                std::to_string(kAnswerTimeout.count()) + " s");
  }
  const std::string answer = receive(fd_);
  if (answer.empty()) {
    throw Error("spawner (pid " + std::to_string(server_.pid()) + ") is gone");
  }
  const pid_t pid = json::parse(answer).at("pid").get<pid_t>();
  if (pid < 0) throw SystemError("spawner: fork", -pid);
  return ChildProcess::adopt(pid, options.die_with_parent);
}

std::optional<std::vector<std::string>> serve_spawns() {
  const char* v = std::getenv(kFdVariable);
  if (!v) {
    throw Error("cohort spawner: started by the launcher only (no " + std::string(kFdVariable) +
                ")");
  }
  const int fd = std::atoi(v);
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  // Nothing of a job runs here: a launcher gone or done closes the channel and this ends.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  for (;;) {
    const std::string msg = receive(fd);
    if (msg.empty()) return std::nullopt;
    json q;
    try {
      q = json::parse(msg);
      q.at("args").get<std::vector<std::string>>();
      q.at("env").get<std::map<std::string, std::string>>();
      q.at("stdout").get<std::string>();
      q.at("stderr").get<std::string>();
      q.at("die_with_parent").get<bool>();
      if (q.contains("cpus")) q.at("cpus").get<std::vector<int>>();
    } catch (const std::exception&) {
      send_message(fd, json{{"pid", -EINVAL}}.dump());
      continue;
    }
    auto forked = fork_worker(fd, q);
    if (auto* args = std::get_if<std::vector<std::string>>(&forked)) return std::move(*args);
    send_message(fd, json{{"pid", std::get<pid_t>(forked)}}.dump());
  }
}

}  // namespace cohort::elastic
