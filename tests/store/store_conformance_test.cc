// One suite for every Store: MemoryStore, TcpStore against a real StoreServer on loopback,
// EtcdStore against a real etcd, and a PrefixStore over the first two. A behaviour that differs
// between them is a bug in one of them.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "cohort/base/error.h"
#include "store_test_env.h"

namespace cohort::store {
namespace {

using testing::StoreEnv;
using testing::StoreKind;

std::vector<StoreKind> all_kinds() {
  std::vector<StoreKind> kinds = testing::base_kinds();
  kinds.push_back({"Etcd", [] { return std::make_unique<testing::EtcdEnv>(); }});
  for (const auto& base : testing::base_kinds()) {
    kinds.push_back({"PrefixOver" + base.name, [make = base.make] {
                       return std::make_unique<testing::PrefixEnv>(make(), "job7");
                     }});
  }
  return kinds;
}

Millis since(Clock::time_point t0) {
  return std::chrono::duration_cast<Millis>(Clock::now() - t0);
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

class StoreConformance : public ::testing::TestWithParam<StoreKind> {
 protected:
  void SetUp() override { env_ = GetParam().make(); }
  Store& client(Millis timeout = Millis(10000)) { return env_->client(timeout); }
  std::unique_ptr<StoreEnv> env_;
};

TEST_P(StoreConformance, SetThenGetFromAnotherClient) {
  Store& a = client();
  Store& b = client();
  a.set("rank0/addr", to_bytes("10.0.0.1:5000"));
  EXPECT_EQ(to_string(b.get("rank0/addr")), "10.0.0.1:5000");
  a.set("rank0/addr", to_bytes("10.0.0.2:6000"));  // overwrite
  EXPECT_EQ(to_string(b.get("rank0/addr")), "10.0.0.2:6000");
}

TEST_P(StoreConformance, GetBlocksUntilAnotherThreadSets) {
  Store& getter = client();
  Store& setter = client();
  std::atomic<bool> set_done{false};
  std::thread t([&] {
    std::this_thread::sleep_for(Millis(150));
    set_done = true;
    setter.set("late", to_bytes("here"));
  });
  auto t0 = Clock::now();
  Bytes v = getter.get("late");
  EXPECT_TRUE(set_done.load()) << "get returned before the key was set";
  EXPECT_EQ(to_string(v), "here");
  EXPECT_GE(since(t0), Millis(140));
  EXPECT_LT(since(t0), Millis(5000));
  t.join();
}

TEST_P(StoreConformance, GetTimesOutNamingTheKey) {
  Store& s = client(Millis(200));
  auto t0 = Clock::now();
  try {
    s.get("never/set");
    FAIL() << "get of a missing key returned";
  } catch (const TimeoutError& e) {
    EXPECT_TRUE(contains(e.what(), "never/set")) << e.what();
  }
  EXPECT_GE(since(t0), Millis(190));
  EXPECT_LT(since(t0), Millis(3000));
}

TEST_P(StoreConformance, AddCountsFromZeroAndReturnsTheNewValue) {
  Store& s = client();
  EXPECT_EQ(s.add("n", 5), 5);
  EXPECT_EQ(s.add("n", -7), -2);
  EXPECT_EQ(s.add("n", 0), -2);
  EXPECT_EQ(to_string(s.get("n")), "-2");
  s.set("m", to_bytes("40"));
  EXPECT_EQ(s.add("m", 2), 42);
}

TEST_P(StoreConformance, ConcurrentAddsFromEightClientsSumCorrectly) {
  constexpr int kThreads = 8, kAdds = 200;
  std::vector<Store*> clients;
  for (int i = 0; i < kThreads; ++i) clients.push_back(&client());
  std::vector<std::thread> ts;
  for (int i = 0; i < kThreads; ++i) {
    ts.emplace_back([&, i] {
      for (int j = 0; j < kAdds; ++j) clients[i]->add("counter", i + 1);
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(client().add("counter", 0), int64_t(kAdds) * kThreads * (kThreads + 1) / 2);
}

TEST_P(StoreConformance, ConcurrentAddsThroughOneSharedClientSumCorrectly) {
  Store& shared = client();
  std::vector<std::thread> ts;
  for (int i = 0; i < 8; ++i) {
    ts.emplace_back([&] {
      for (int j = 0; j < 100; ++j) shared.add("shared", 1);
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(shared.add("shared", 0), 800);
}

TEST_P(StoreConformance, AddOnANonIntegerIsAnErrorAndTheStoreStillWorks) {
  Store& s = client();
  s.set("text", to_bytes("12abc"));
  EXPECT_THROW(s.add("text", 1), Error);
  EXPECT_EQ(to_string(s.get("text")), "12abc");
  EXPECT_EQ(s.add("other", 1), 1);
}

TEST_P(StoreConformance, CompareSetOnAnAbsentKey) {
  Store& s = client();
  // Expected non-empty: nothing to compare with, nothing changes.
  EXPECT_EQ(s.compare_set("k", to_bytes("x"), to_bytes("y")), Bytes{});
  EXPECT_FALSE(s.check({"k"}));
  // Expected empty means "absent": it sets.
  EXPECT_EQ(to_string(s.compare_set("k", {}, to_bytes("first"))), "first");
  EXPECT_EQ(to_string(s.get("k")), "first");
  // Now present: a second "create if absent" loses and sees the winner.
  EXPECT_EQ(to_string(s.compare_set("k", {}, to_bytes("second"))), "first");
}

TEST_P(StoreConformance, CompareSetSwapsOnlyOnAMatch) {
  Store& s = client();
  s.set("leader", to_bytes("rank2"));
  EXPECT_EQ(to_string(s.compare_set("leader", to_bytes("rank1"), to_bytes("rank3"))), "rank2");
  EXPECT_EQ(to_string(s.get("leader")), "rank2");
  EXPECT_EQ(to_string(s.compare_set("leader", to_bytes("rank2"), to_bytes("rank3"))), "rank3");
  EXPECT_EQ(to_string(s.get("leader")), "rank3");
}

TEST_P(StoreConformance, CompareSetElectsExactlyOneWinnerAmongRacers) {
  std::vector<Store*> clients;
  for (int i = 0; i < 8; ++i) clients.push_back(&client());
  std::atomic<int> winners{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < 8; ++i) {
    ts.emplace_back([&, i] {
      Bytes mine = to_bytes("rank" + std::to_string(i));
      if (clients[i]->compare_set("winner", {}, mine) == mine) ++winners;
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(winners.load(), 1);
}

TEST_P(StoreConformance, DeleteRemovesAndReportsWhetherTheKeyExisted) {
  Store& s = client(Millis(150));
  s.set("d", to_bytes("1"));
  EXPECT_TRUE(s.delete_key("d"));
  EXPECT_FALSE(s.delete_key("d"));
  EXPECT_FALSE(s.check({"d"}));
  EXPECT_THROW(s.get("d"), TimeoutError);
  EXPECT_EQ(s.add("d", 3), 3);  // a deleted counter starts from zero again
}

TEST_P(StoreConformance, CheckIsTrueOnlyWhenEveryKeyExists) {
  Store& s = client();
  EXPECT_TRUE(s.check({}));
  EXPECT_FALSE(s.check({"a"}));
  s.set("a", {});
  EXPECT_TRUE(s.check({"a"}));  // an empty value still exists
  EXPECT_FALSE(s.check({"a", "b"}));
  s.set("b", to_bytes("2"));
  EXPECT_TRUE(s.check({"a", "b"}));
}

TEST_P(StoreConformance, WaitReturnsOnceEveryKeyIsSet) {
  Store& waiter = client();
  Store& setter = client();
  std::atomic<int> set_count{0};
  std::thread t([&] {
    for (const char* k : {"w/0", "w/1", "w/2"}) {
      std::this_thread::sleep_for(Millis(40));
      ++set_count;
      setter.set(k, to_bytes(k));
    }
  });
  waiter.wait({"w/0", "w/1", "w/2"}, Millis(5000));
  EXPECT_EQ(set_count.load(), 3);
  t.join();
  waiter.wait({"w/0", "w/1", "w/2"}, Millis(0));  // already there: no wait at all
}

TEST_P(StoreConformance, WaitTimeoutNamesOnlyTheMissingKeys) {
  Store& s = client();
  s.set("have", to_bytes("1"));
  auto t0 = Clock::now();
  try {
    s.wait({"have", "missing-a", "missing-b"}, Millis(200));
    FAIL() << "wait returned with keys missing";
  } catch (const TimeoutError& e) {
    EXPECT_TRUE(contains(e.what(), "missing-a")) << e.what();
    EXPECT_TRUE(contains(e.what(), "missing-b")) << e.what();
    EXPECT_FALSE(contains(e.what(), "have")) << e.what();
  }
  EXPECT_GE(since(t0), Millis(190));
  EXPECT_LT(since(t0), Millis(3000));
  s.set("later", to_bytes("1"));  // the store is still usable after a timeout
  EXPECT_TRUE(s.check({"later"}));
}

TEST_P(StoreConformance, LargeValuesRoundTrip) {
  Store& a = client();
  Store& b = client();
  Bytes big(1 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  a.set("big", big);
  EXPECT_EQ(b.get("big"), big);
  Bytes bigger = big;
  bigger.push_back(7);
  EXPECT_EQ(b.compare_set("big", big, bigger), bigger);
  EXPECT_EQ(a.get("big"), bigger);
}

TEST_P(StoreConformance, BinaryValuesAndKeysSurviveExactly) {
  Store& s = client();
  Bytes all(256 * 2);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint8_t>(i);  // includes zeros
  const std::string key("bin\0key/\xff", 9);
  s.set(key, all);
  EXPECT_EQ(s.get(key), all);
  s.set("zeros", Bytes(1000, 0));
  EXPECT_EQ(s.get("zeros"), Bytes(1000, 0));
  s.set("empty", {});
  EXPECT_EQ(s.get("empty"), Bytes{});
  EXPECT_FALSE(s.check({std::string("bin")}));  // the key was not cut at its zero byte
}

INSTANTIATE_TEST_SUITE_P(AllStores, StoreConformance, ::testing::ValuesIn(all_kinds()),
                         [](const auto& info) { return info.param.name; });

// Two PrefixStores over one base client do not see each other's keys.
class PrefixIsolation : public ::testing::TestWithParam<StoreKind> {};

TEST_P(PrefixIsolation, TwoPrefixesOverOneBaseAreIndependent) {
  auto env = GetParam().make();
  Store& base = env->client(Millis(150));
  PrefixStore a("job-a", base), b("job-b", base);
  a.set("addr", to_bytes("A"));
  EXPECT_FALSE(b.check({"addr"}));
  EXPECT_THROW(b.get("addr"), TimeoutError);
  b.set("addr", to_bytes("B"));
  EXPECT_EQ(to_string(a.get("addr")), "A");
  EXPECT_EQ(to_string(b.get("addr")), "B");
  EXPECT_EQ(a.add("n", 1), 1);
  EXPECT_EQ(b.add("n", 10), 10);
  EXPECT_TRUE(b.delete_key("n"));
  EXPECT_EQ(a.add("n", 0), 1);
  EXPECT_THROW(b.wait({"only-in-a"}, Millis(100)), TimeoutError);
  // The base sees both, under their prefixes.
  EXPECT_EQ(to_string(base.get("job-a/addr")), "A");
  EXPECT_EQ(to_string(base.get("job-b/addr")), "B");
  // Nested prefixes compose.
  PrefixStore inner("epoch1", a);
  inner.set("x", to_bytes("1"));
  EXPECT_TRUE(base.check({"job-a/epoch1/x"}));
}

INSTANTIATE_TEST_SUITE_P(AllBases, PrefixIsolation, ::testing::ValuesIn(testing::base_kinds()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace cohort::store
