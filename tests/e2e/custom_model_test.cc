// End to end: Cohort used as an installed library by a program of its own. Installs this build
// into a temporary prefix, builds examples/custom_model against it with find_package(Cohort), and
// trains its model with two processes that meet through environment variables.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "shell.h"

namespace fs = std::filesystem;

namespace {

using cohort::e2e::Result;
using cohort::e2e::sh;

// A loopback port nobody listens on right now.
int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return -1;
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// Starts `exe args...` with extra environment variables, stdout and stderr into `log`.
pid_t spawn(const std::string& exe, const std::vector<std::string>& args,
            const std::map<std::string, std::string>& env, const fs::path& log) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
  FILE* f = std::fopen(log.c_str(), "w");
  if (f) {
    dup2(fileno(f), 1);
    dup2(fileno(f), 2);
  }
  std::vector<char*> argv{const_cast<char*>(exe.c_str())};
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execv(exe.c_str(), argv.data());
  _exit(127);
}

// Waits for `pid` until the deadline, then kills it. Returns the exit code (128 + signal if
// killed).
int wait_until(pid_t pid, std::chrono::steady_clock::time_point deadline) {
  int st = 0;
  while (waitpid(pid, &st, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// The text after `marker` up to the end of its line ("" if absent).
std::string value_after(const std::string& text, const std::string& marker) {
  auto at = text.find(marker);
  if (at == std::string::npos) return "";
  at += marker.size();
  return text.substr(at, text.find('\n', at) - at);
}

TEST(CustomModel, BuildsAgainstTheInstalledLibraryAndTrainsOnTwoProcesses) {
  auto dir = fs::temp_directory_path() / ("cohort-e2e-custom-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path build_dir = fs::path(COHORT_BINARY).parent_path();  // `cohort` is at its root
  const fs::path prefix = dir / "prefix", example_build = dir / "build";

  auto r = sh("cmake --install " + build_dir.string() + " --prefix " + prefix.string(), 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(prefix / "lib/cmake/Cohort/CohortConfig.cmake"));
  EXPECT_TRUE(fs::exists(prefix / "include/cohort/elastic/environment.h"));
  EXPECT_TRUE(fs::exists(prefix / "bin/cohort"));

  r = sh("cmake -S " + std::string(COHORT_SOURCE_DIR) + "/examples/custom_model -B " +
             example_build.string() +
             " -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=" + prefix.string(),
         120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = sh("cmake --build " + example_build.string() + " -j 2", 400);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string exe = (example_build / "custom_model").string();
  ASSERT_TRUE(fs::exists(exe));

  const int port = free_port();
  ASSERT_GT(port, 0);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 2; ++rank) {
    pids.push_back(spawn(exe, {"--max-steps", "150"},
                         {{"COHORT_RANK", std::to_string(rank)},
                          {"COHORT_WORLD_SIZE", "2"},
                          {"COHORT_MASTER_ADDR", "127.0.0.1:" + std::to_string(port)},
                          {"COHORT_TOKEN", "custom-model-test"},
                          {"COHORT_TIMEOUT_S", "60"}},
                         dir / ("rank" + std::to_string(rank) + ".log")));
  }
  std::vector<std::string> logs;
  for (int rank = 0; rank < 2; ++rank) {
    int code = wait_until(pids[rank], deadline);
    logs.push_back(read_text(dir / ("rank" + std::to_string(rank) + ".log")));
    EXPECT_EQ(code, 0) << "rank " << rank << ":\n" << logs.back();
  }

  auto accuracy_text = value_after(logs[0], "test accuracy: ");
  ASSERT_FALSE(accuracy_text.empty()) << logs[0];
  EXPECT_NE(logs[0].find("trained 150 steps on 2 ranks"), std::string::npos) << logs[0];
  // Ten classes: chance is 0.1; 150 steps of 128 examples get well past it.
  EXPECT_GT(std::stod(accuracy_text), 0.5) << logs[0];
  EXPECT_EQ(logs[1].find("test accuracy"), std::string::npos) << logs[1];  // rank 0 reports

  auto digest0 = value_after(logs[0], "rank 0 parameter digest: ");
  auto digest1 = value_after(logs[1], "rank 1 parameter digest: ");
  EXPECT_EQ(digest0.size(), 64u) << logs[0];
  EXPECT_EQ(digest0, digest1) << logs[0] << logs[1];
  fs::remove_all(dir);
}

}  // namespace
