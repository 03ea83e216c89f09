// Leadership over a real etcd: one leader at a time; a standby takes over within the lease's ttl
// once the leader's process is SIGKILLed, and at once when the leader ends cleanly.
#include "cohort/elastic/leadership.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../store/etcd_cluster.h"

namespace cohort::elastic {
namespace {

using namespace std::chrono_literals;

TEST(Leadership, OneCoordinatorLeadsAtATime) {
  store::testing::EtcdCluster etcd(1);
  const auto job = store::EtcdAddress::parse(etcd.url("job"));
  Leadership a(job, 2000ms, "a"), b(job, 2000ms, "b");
  EXPECT_TRUE(a.try_lead());
  EXPECT_FALSE(b.try_lead());
  EXPECT_EQ(b.leader(), "a");
  std::this_thread::sleep_for(2500ms);  // longer than the ttl: a's renewals keep it
  EXPECT_TRUE(a.held());
  EXPECT_FALSE(b.try_lead());
}

TEST(Leadership, AStandbyLeadsWithinTheTtlOfTheLeadersDeath) {
  store::testing::EtcdCluster etcd(1);
  const auto job = store::EtcdAddress::parse(etcd.url("job"));
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t leader = fork();
  if (leader == 0) {
    Leadership l(job, 1000ms, "doomed");
    const char ok = l.try_lead() ? '1' : '0';
    if (write(ready[1], &ok, 1) != 1) _exit(2);
    pause();
    _exit(0);
  }
  char ok = 0;
  ASSERT_EQ(read(ready[0], &ok, 1), 1);
  ASSERT_EQ(ok, '1');
  Leadership standby(job, 1000ms, "standby");
  EXPECT_FALSE(standby.try_lead());
  kill(leader, SIGKILL);
  waitpid(leader, nullptr, 0);
  const auto t0 = Clock::now();
  std::string waited_for;
  standby.wait_to_lead([&](const std::string& who) { waited_for = who; });
  EXPECT_TRUE(standby.held());
  EXPECT_EQ(waited_for, "doomed");
  EXPECT_LT(Clock::now() - t0, 1000ms + 2000ms);  // the ttl, which etcd may round up to its own
  close(ready[0]);
  close(ready[1]);
}

TEST(Leadership, AStandbyLeadsAtOnceWhenTheLeaderEndsCleanly) {
  store::testing::EtcdCluster etcd(1);
  const auto job = store::EtcdAddress::parse(etcd.url("job"));
  auto a = std::make_unique<Leadership>(job, 5000ms, "a");
  ASSERT_TRUE(a->try_lead());
  Leadership b(job, 5000ms, "b");
  EXPECT_FALSE(b.try_lead());
  a.reset();
  const auto t0 = Clock::now();
  b.wait_to_lead([](const std::string&) {});
  EXPECT_LT(Clock::now() - t0, 1000ms);
}

}  // namespace
}  // namespace cohort::elastic
