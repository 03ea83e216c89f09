// `cohort ps-server` as a process: how it ends. Real binary, real store over loopback.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "cohort/ps/server.h"
#include "cohort/ps/view.h"
#include "cohort/store/tcp_store.h"
#include "cohort_process.h"

namespace cohort::testing {
namespace {

constexpr const char* kToken = "ps-server-cli-test-token";

// Sets COHORT_TOKEN for the processes a test starts (they inherit this process's environment).
class PsServerCli : public ::testing::Test {
 protected:
  void SetUp() override { setenv("COHORT_TOKEN", kToken, 1); }
  void TearDown() override { unsetenv("COHORT_TOKEN"); }
};

// Whether `pid` catches SIGTERM (SigCgt of /proc/PID/status): from then on a SIGTERM no longer
// kills it by default, and only the server's own handling can end it.
bool catches_sigterm(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("SigCgt:", 0) == 0) {
      const unsigned long long mask = std::stoull(line.substr(7), nullptr, 16);
      return (mask >> (SIGTERM - 1)) & 1;
    }
  }
  return false;
}

// A server whose job's store cannot be reached retries for half a minute; SIGTERM meanwhile ends
// it at once, with status 0.
TEST_F(PsServerCli, SigtermStopsAServerStillTryingToReachItsStore) {
  CohortProcess p({"ps-server", "--join", "127.0.0.1:1", "--index", "0"});
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (!catches_sigterm(p.pid()) && std::chrono::steady_clock::now() < deadline) {
    ASSERT_FALSE(p.wait_for(10ms)) << "ended before it caught SIGTERM: " << p.err();
  }
  ASSERT_TRUE(catches_sigterm(p.pid())) << "never caught SIGTERM: " << p.err();
  ASSERT_EQ(kill(p.pid(), SIGTERM), 0);
  const auto st = p.wait_for(10s);
  ASSERT_TRUE(st) << "still running 10 s after SIGTERM (it retries the store for 30 s)";
  EXPECT_TRUE(exited_with(st, 0)) << p.err();
  EXPECT_NE(p.err().find("before it had joined its job"), std::string::npos) << p.err();
}

// A job that is over (ps/stop, which `cohort run` writes at its end so that servers started
// elsewhere end too) ends its servers with status 0, without a signal.
TEST_F(PsServerCli, AServerEndsByItselfWhenItsJobIsOver) {
  store::StoreServer store({.bind_host = "127.0.0.1", .port = 0, .token = kToken});
  store::TcpStore client(store.endpoint(), kToken, 10s);
  ps::ServerSettings settings;
  settings.heartbeat = 100ms;
  client.set(ps::keys::kSettings, store::to_bytes(settings.to_json()));
  CohortProcess p({"ps-server", "--join", store.endpoint().str(), "--index", "0"});
  // Registered: it has joined and serves; then the job ends.
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (!client.check({ps::keys::registration(0)}) &&
         std::chrono::steady_clock::now() < deadline) {
    ASSERT_FALSE(p.wait_for(10ms)) << "ended before it registered: " << p.err();
  }
  ASSERT_TRUE(client.check({ps::keys::registration(0)})) << p.err();
  client.set(ps::keys::kStop, store::to_bytes("1"));
  const auto st = p.wait_for(15s);
  ASSERT_TRUE(st) << "still running 15 s after its job ended: " << p.err();
  EXPECT_TRUE(exited_with(st, 0)) << p.err();
  EXPECT_NE(p.err().find("the job is over"), std::string::npos) << p.err();
}

}  // namespace
}  // namespace cohort::testing
