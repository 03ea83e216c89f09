// Subgroups: split(color, key) and subgroup(ranks) form communicators of their own, numbered as
// asked, with their own sequence numbers, usable beside their parent from other threads and after
// it is gone; lists that differ between ranks are refused by every rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "cohort/comm/communicator.h"
#include "world.h"

namespace cohort::comm {
namespace {

using testing::World;

// Sum over the group of (rank in the parent + 1), by an allreduce of the group.
int64_t sum_of_parent_ranks(Communicator& group, int parent_rank) {
  int64_t v = parent_rank + 1;
  group.allreduce(Buffer{DType::I64, &v, 1})->wait();
  return v;
}

TEST(Split, GroupsByColorAndNumbersByKeyThenRank) {
  const int n = 6;
  World world(n);
  world.run([&](int r, Communicator& comm) {
    // Colors: even and odd ranks; keys reverse the order; rank 5 joins no group.
    const int color = r == 5 ? -1 : r % 2;
    auto group = comm.split(color, -r);
    // The parent's split was its #1; its next collective is #2, whatever its groups do.
    int64_t one = 1;
    auto w = comm.allreduce(Buffer{DType::I64, &one, 1});
    w->wait();
    EXPECT_EQ(w->sequence(), 2u);
    EXPECT_EQ(one, 6);
    if (r == 5) {
      EXPECT_EQ(group, nullptr);
      return;
    }
    ASSERT_NE(group, nullptr);
    const std::vector<int> members = r % 2 ? std::vector<int>{3, 1} : std::vector<int>{4, 2, 0};
    ASSERT_EQ(group->size(), static_cast<int>(members.size())) << "rank " << r;
    EXPECT_EQ(members[static_cast<size_t>(group->rank())], r);
    int64_t want = 0;
    for (int m : members) want += m + 1;
    EXPECT_EQ(sum_of_parent_ranks(*group, r), want) << "rank " << r;
    // Sequence numbers of its own: the group's first collective is #1.
    const FlightSnapshot s = group->flight_recorder().snapshot();
    ASSERT_EQ(s.records.size(), 1u);
    EXPECT_EQ(s.records.back().seq, 1u);
  });
}

TEST(Split, EqualKeysKeepTheParentsOrder) {
  World world(4);
  world.run([&](int r, Communicator& comm) {
    auto group = comm.split(0, 7);
    ASSERT_NE(group, nullptr);
    EXPECT_EQ(group->rank(), r);
    EXPECT_EQ(group->size(), 4);
  });
}

TEST(Subgroup, NumbersMembersInTheOrderListedAndLeavesOthersOut) {
  World world(5);
  const std::vector<int> list = {3, 1, 4};
  world.run([&](int r, Communicator& comm) {
    auto group = comm.subgroup(list);
    const auto it = std::find(list.begin(), list.end(), r);
    if (it == list.end()) {
      EXPECT_EQ(group, nullptr) << "rank " << r;
      return;
    }
    ASSERT_NE(group, nullptr);
    EXPECT_EQ(group->rank(), it - list.begin());
    EXPECT_EQ(group->size(), 3);
    EXPECT_EQ(sum_of_parent_ranks(*group, r), 4 + 2 + 5);
    // Rank numbers are the group's: a broadcast from group rank 0 comes from parent rank 3.
    int64_t v = r == 3 ? 42 : 0;
    group->broadcast(Buffer{DType::I64, &v, 1}, {.root = 0})->wait();
    EXPECT_EQ(v, 42);
  });
}

TEST(Subgroup, RanksThatPassDifferentListsAreAllRefused) {
  World world(3);
  world.run([&](int r, Communicator& comm) {
    const std::vector<int> list = r == 0 ? std::vector<int>{0, 1} : std::vector<int>{0, 2};
    try {
      comm.subgroup(list);
      ADD_FAILURE() << "rank " << r << " formed a group from a list others did not pass";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("different rank list"), std::string::npos) << e.what();
    }
  });
}

TEST(Subgroup, ABadListIsRefusedBeforeAnythingIsSent) {
  World world(2);
  world.run([&](int, Communicator& comm) {
    EXPECT_THROW(comm.subgroup({0, 2}), ConfigError);
    EXPECT_THROW(comm.subgroup({1, 1}), ConfigError);
    EXPECT_THROW(comm.subgroup({-1}), ConfigError);
    // Nothing was issued: the next collective is the parent's first.
    int64_t v = 1;
    auto w = comm.allreduce(Buffer{DType::I64, &v, 1});
    w->wait();
    EXPECT_EQ(w->sequence(), 1u);
  });
}

TEST(Subgroup, RunsBesideItsParentOnAnotherThreadAndOutlivesIt) {
  // Each rank drives the parent and its group from two threads at once, in no agreed order
  // between the two: they share no connection and no queue, so neither waits for the other.
  const int n = 4;
  World world(n);
  std::vector<std::unique_ptr<Communicator>> groups(n);
  world.run(
      [&](int r, Communicator& comm) { groups[static_cast<size_t>(r)] = comm.split(r / 2, r); });
  testing::on_threads(n, [&](int r) {
    std::thread side([&] {
      for (int i = 0; i < 50; ++i) {
        EXPECT_EQ(sum_of_parent_ranks(*groups[static_cast<size_t>(r)], r), r < 2 ? 3 : 7);
      }
    });
    for (int i = 0; i < 50; ++i) EXPECT_EQ(sum_of_parent_ranks(world[r], r), 10);
    side.join();
  });
  for (int r = 0; r < n; ++r) world.slot(r).reset();
  testing::on_threads(n, [&](int r) {
    EXPECT_EQ(sum_of_parent_ranks(*groups[static_cast<size_t>(r)], r), r < 2 ? 3 : 7);
  });
}

}  // namespace
}  // namespace cohort::comm
