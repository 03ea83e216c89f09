// The launcher's fork server, with the real `cohort` binary as the spawner: what it forks runs the
// command asked for, with its environment and log, as a child of the launcher.
#include "cohort/elastic/spawner.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace cohort::elastic {
namespace {

namespace fs = std::filesystem;

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The parent pid of `pid` from /proc (0 when it is gone).
pid_t parent_of(pid_t pid) {
  std::string stat = read("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return 0;
  std::istringstream rest(stat.substr(paren + 2));
  char state = 0;
  pid_t ppid = 0;
  rest >> state >> ppid;
  return ppid;
}

class SpawnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::unsetenv("COHORT_TOKEN");
    dir_ = fs::temp_directory_path() / ("cohort-spawner-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // A parameter server that cannot reach its store: with a token (from its environment: never on
  // a command line) it retries the refused connection for half a minute.
  SpawnOptions server(const std::string& log, std::map<std::string, std::string> env = {}) {
    return {.executable = COHORT_BINARY,
            .args = {"ps-server", "--join", "127.0.0.1:1", "--index", "0"},
            .env = std::move(env),
            .stdout_path = (dir_ / log).string(),
            .stderr_path = (dir_ / log).string()};
  }
  fs::path dir_;
};

TEST_F(SpawnerTest, AForkedWorkerRunsItsCommandWithItsEnvironmentAndLogAndItsStatusIsRead) {
  auto spawner = Spawner::start(COHORT_BINARY, {});
  // `cohort jobs` asks the server its environment names, and names it when it cannot reach it.
  SpawnOptions o =
      server("a.log", {{"COHORT_SERVER", "http://127.0.0.1:1"}, {"COHORT_HOME", dir_.string()}});
  o.args = {"jobs"};
  ChildProcess w = spawner->spawn(o);
  ASSERT_GT(w.pid(), 0);
  EXPECT_NE(w.pid(), spawner->pid());
  const std::optional<ExitStatus> st = w.wait_for(std::chrono::seconds(30));
  ASSERT_TRUE(st.has_value()) << "the worker did not end";
  EXPECT_EQ(st->signal, 0) << st->describe();
  EXPECT_NE(st->code, 0) << st->describe();
  EXPECT_NE(read(dir_ / "a.log").find("cannot reach cohort serve at http://127.0.0.1:1"),
            std::string::npos)
      << read(dir_ / "a.log");
}

TEST_F(SpawnerTest, AForkedWorkerIsTheLaunchersChildAndOutlivesTheSpawner) {
  auto spawner = Spawner::start(COHORT_BINARY, {});
  const pid_t spawner_pid = spawner->pid();
  ChildProcess w = spawner->spawn(server("b.log", {{"COHORT_TOKEN", "secret"}}));
  ASSERT_GT(w.pid(), 0);
  EXPECT_EQ(parent_of(w.pid()), ::getpid());
  spawner.reset();  // the spawner ends with its channel; what it forked does not
  EXPECT_EQ(::kill(spawner_pid, 0), -1);
  EXPECT_FALSE(w.poll().has_value()) << read(dir_ / "b.log");
  // Signalled and reaped by us: the SIGTERM ends it (a server still joining its job stops at
  // once with status 0; killed by it if it came before the handler), not the SIGKILL after it.
  const ExitStatus st = w.terminate(std::chrono::seconds(5));
  EXPECT_TRUE(st.signal == SIGTERM || (st.signal == 0 && st.code == 0)) << st.describe();
}

// A spawner that died is an error at once (cohort run then starts workers with their own exec),
// not a wait for an answer that will not come.
TEST_F(SpawnerTest, ASpawnerThatDiedIsAnErrorAtOnce) {
  auto spawner = Spawner::start(COHORT_BINARY, {});
  ASSERT_EQ(::kill(spawner->pid(), SIGKILL), 0);
  while (parent_of(spawner->pid()) == ::getpid() &&
         read("/proc/" + std::to_string(spawner->pid()) + "/stat").find(") Z") ==
             std::string::npos) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_ANY_THROW(spawner->spawn(server("d.log", {{"COHORT_TOKEN", "secret"}})));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

TEST_F(SpawnerTest, OnlyTheSpawnersOwnBinaryIsForked) {
  auto spawner = Spawner::start(COHORT_BINARY, {});
  SpawnOptions other = server("c.log");
  other.executable = "/bin/true";
  EXPECT_ANY_THROW(spawner->spawn(other));
}

}  // namespace
}  // namespace cohort::elastic
