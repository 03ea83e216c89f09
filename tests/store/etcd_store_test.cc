// EtcdStore beyond the conformance suite: its address, a cluster of three that loses a member
// (the store serves on, a waiting get included), removing one job's keys, and an add whose answer
// was lost after etcd applied it.
#include <gtest/gtest.h>

#include <atomic>
#include <cctype>
#include <thread>

#include "cohort/base/error.h"
#include "cohort/net/socket.h"
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

// Between an EtcdStore and one etcd member: forwards each HTTP/1.1 request and its answer, except
// the answer to the first /v3/kv/txn, whose connection it closes once etcd has answered (the
// transaction is applied; its answer never arrives). One client connection at a time.
class LosesTheFirstTransactionsAnswer {
 public:
  explicit LosesTheFirstTransactionsAnswer(net::Endpoint member)
      : listener_(net::Listener::bind("127.0.0.1", 0)), member_(std::move(member)) {
    thread_ = std::thread([this] { serve(); });
  }
  ~LosesTheFirstTransactionsAnswer() {
    stop_ = true;
    thread_.join();
  }
  std::string url(const std::string& prefix) const {
    return "etcd://127.0.0.1:" + std::to_string(listener_.port()) + "/" + prefix;
  }
  int answers_lost() const { return lost_.load(); }

 private:
  void serve() {
    while (!stop_) {
      try {
        net::Socket client = listener_.accept(Deadline::after(Millis(100)));
        net::Socket member = net::Socket::connect(member_, Deadline::after(Millis(5000)));
        relay(client, member);
      } catch (const Error&) {
        // A timed-out accept, or a connection that closed: the next one.
      }
    }
  }

  void relay(net::Socket& client, net::Socket& member) {
    for (;;) {
      const std::string request = read_message(client);
      member.send_all(request.data(), request.size(), Deadline::after(Millis(5000)));
      const std::string answer = read_message(member);
      if (lost_ == 0 && request.rfind("POST /v3/kv/txn ", 0) == 0) {
        ++lost_;
        return;  // both connections close
      }
      client.send_all(answer.data(), answer.size(), Deadline::after(Millis(5000)));
    }
  }

  // One HTTP message: its header, then a body of Content-Length bytes or chunks up to the last.
  static std::string read_message(net::Socket& s) {
    std::string m;
    size_t body = std::string::npos;
    for (;;) {
      if (body == std::string::npos && (body = m.find("\r\n\r\n")) != std::string::npos) body += 4;
      if (body != std::string::npos) {
        std::string head = m.substr(0, body);
        for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        const size_t cl = head.find("content-length:");
        if (cl != std::string::npos) {
          if (m.size() >= body + std::stoul(head.substr(cl + 15))) return m;
        } else if (head.find("chunked") == std::string::npos ||
                   m.compare(m.size() - 5, 5, "0\r\n\r\n") == 0) {
          return m;
        }
      }
      char buf[4096];
      s.recv_all(buf, 1, Deadline::after(Millis(5000)));
      m.push_back(buf[0]);
      if (const size_t more = s.recv_some(buf, sizeof buf)) m.append(buf, more);
    }
  }

  net::Listener listener_;
  net::Endpoint member_;
  std::atomic<bool> stop_{false};
  std::atomic<int> lost_{0};
  std::thread thread_;
};

// etcd applied the add's transaction and its answer was lost: the store sends it again, which
// fails its compare now. The add is applied once, not twice (a rank claimed through an add would
// otherwise skip a rank that nobody then takes).
TEST(EtcdStore, AnAddWhoseAnswerWasLostIsAppliedOnce) {
  EtcdCluster etcd(1);
  LosesTheFirstTransactionsAnswer proxy(EtcdAddress::parse(etcd.url("x")).members.at(0));
  EtcdStore s(EtcdAddress::parse(proxy.url("lost-answer")), 10s);
  EXPECT_EQ(s.add("n", 1), 1);
  EXPECT_EQ(proxy.answers_lost(), 1);
  EXPECT_EQ(s.add("n", 0), 1);
  EXPECT_EQ(s.add("n", 5), 6);
  EtcdStore direct(EtcdAddress::parse(etcd.url("lost-answer")), 10s);
  EXPECT_EQ(to_string(direct.get("n")), "6");
}

}  // namespace
}  // namespace cohort::store
