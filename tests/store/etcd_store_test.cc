// EtcdStore beyond the conformance suite: its address, a cluster of three that loses a member
// (the store serves on, a waiting get included), and removing one job's keys.
#include <gtest/gtest.h>

#include <thread>

#include "cohort/base/error.h"
#include "cohort/store/connect.h"
#include "etcd_cluster.h"

namespace cohort::store {
namespace {

using namespace std::chrono_literals;
using testing::EtcdCluster;

TEST(EtcdAddress, ParsesMembersAndPrefixAndRefusesWhatIsNotOne) {
  const EtcdAddress a = EtcdAddress::parse("etcd://10.0.0.1:2379,etcd-1:2380/jobs/mnist/");
  ASSERT_EQ(a.members.size(), 2u);
  EXPECT_EQ(a.members[0].str(), "10.0.0.1:2379");
  EXPECT_EQ(a.members[1].host, "etcd-1");
  EXPECT_EQ(a.prefix, "jobs/mnist");
  EXPECT_EQ(a.str(), "etcd://10.0.0.1:2379,etcd-1:2380/jobs/mnist");
  for (const char* bad :
       {"http://h:2379/p", "etcd://h:2379", "etcd://h:2379/", "etcd://h/p", "etcd://h:2379,,h:1/p",
        "etcd://h:99999/p", "etcd://h:1/a b", "etcd://h\xff:1/p"}) {
    EXPECT_THROW(EtcdAddress::parse(bad), ConfigError) << bad;
  }
  EXPECT_THROW(EtcdAddress::parse(std::string("etcd://h:1/p\0x", 14)), ConfigError);
  EXPECT_TRUE(is_etcd("etcd://h:1/p"));
  EXPECT_FALSE(is_etcd("127.0.0.1:29500"));
  EXPECT_EQ(store_host("etcd://h1:1,h2:2/p"), "h1");
  EXPECT_EQ(store_host("10.1.2.3:29500"), "10.1.2.3");
}

TEST(EtcdStore, AClusterOfThreeServesOnWhenAMemberIsKilled) {
  EtcdCluster etcd(3);
  EtcdStore a(EtcdAddress::parse(etcd.url("job")), 20s);
  EtcdStore b(EtcdAddress::parse(etcd.url("job")), 20s);
  a.set("before", to_bytes("1"));
  EXPECT_EQ(a.add("n", 1), 1);
  // A get waiting across the kill of the member every client talks to first.
  std::thread setter([&] {
    etcd.kill(0);
    b.set("after", to_bytes("2"));
  });
  EXPECT_EQ(to_string(a.get("after")), "2");
  setter.join();
  EXPECT_EQ(to_string(b.get("before")), "1");
  EXPECT_EQ(b.add("n", 1), 2);
  EXPECT_EQ(to_string(b.compare_set("leader", {}, to_bytes("b"))), "b");
  EXPECT_EQ(to_string(a.compare_set("leader", {}, to_bytes("a"))), "b");
  EXPECT_TRUE(a.delete_key("before"));
  EXPECT_FALSE(b.check({"before"}));
}

TEST(EtcdStore, ABrokenClusterIsATimeoutNamingItsMembers) {
  EtcdCluster etcd(1);
  EtcdStore s(EtcdAddress::parse(etcd.url("job")), 500ms);
  etcd.kill(0);
  try {
    s.set("k", to_bytes("v"));
    FAIL() << "set on a dead cluster returned";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find(EtcdAddress::parse(etcd.url("job")).members[0].str()),
              std::string::npos)
        << e.what();
  }
}

// A coordinator's writes hold only while its lease holds the lead: once another lease does, every
// kind of write is refused and changes nothing.
TEST(EtcdStore, AFencedWriterIsRefusedOnceAnotherLeaseHoldsTheKey) {
  EtcdCluster etcd(1);
  EtcdStore a(EtcdAddress::parse(etcd.url("job")), 5s);
  EtcdStore b(EtcdAddress::parse(etcd.url("job")), 5s);
  const int64_t mine = a.grant_lease(10s);
  ASSERT_TRUE(a.create_with_lease("lead", to_bytes("a"), mine));
  a.fence("lead", mine);
  a.set("x", to_bytes("1"));
  EXPECT_EQ(a.add("n", 2), 2);
  EXPECT_EQ(a.add("n", 0), 2);
  EXPECT_EQ(to_string(a.compare_set("c", {}, to_bytes("a"))), "a");
  a.set("gone", to_bytes("1"));
  EXPECT_TRUE(a.delete_key("gone"));
  b.revoke_lease(mine);  // the lead lapses; another takes it
  const int64_t theirs = b.grant_lease(10s);
  ASSERT_TRUE(b.create_with_lease("lead", to_bytes("b"), theirs));
  EXPECT_FALSE(b.create_with_lease("lead", to_bytes("b2"), theirs + 1));
  EXPECT_THROW(a.set("x", to_bytes("2")), FencedError);
  EXPECT_THROW(a.add("n", 1), FencedError);
  EXPECT_THROW(a.compare_set("c", to_bytes("a"), to_bytes("z")), FencedError);
  EXPECT_THROW(a.delete_key("x"), FencedError);
  EXPECT_THROW(a.delete_all(), FencedError);
  EXPECT_EQ(to_string(b.get("x")), "1");
  EXPECT_EQ(to_string(b.get("n")), "2");
  EXPECT_EQ(to_string(b.get("c")), "a");
  EXPECT_EQ(to_string(a.get("x")), "1");  // reading is not writing
}

TEST(EtcdStore, DeleteAllRemovesOnePrefixAndLeavesTheOthers) {
  EtcdCluster etcd(1);
  EtcdStore mine(EtcdAddress::parse(etcd.url("jobs/a")), 10s);
  EtcdStore longer(EtcdAddress::parse(etcd.url("jobs/ab")), 10s);
  EtcdStore other(EtcdAddress::parse(etcd.url("jobs/b")), 10s);
  for (const char* k : {"x", "y/z", "job/config"}) {
    mine.set(k, to_bytes("1"));
    longer.set(k, to_bytes("1"));
    other.set(k, to_bytes("1"));
  }
  EXPECT_EQ(mine.delete_all(), 3);
  EXPECT_FALSE(mine.check({"x"}));
  EXPECT_FALSE(mine.check({"job/config"}));
  EXPECT_TRUE(longer.check({"x", "y/z", "job/config"}));
  EXPECT_TRUE(other.check({"x", "y/z", "job/config"}));
}

}  // namespace
}  // namespace cohort::store
