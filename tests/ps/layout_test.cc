#include "cohort/ps/layout.h"

#include <gtest/gtest.h>

#include "cohort/base/error.h"

namespace cohort::ps {
namespace {

TEST(Layout, ShardsAreBalancedByValuesWhateverTheKeySizes) {
  // One huge tensor and many small ones: every server gets a share within one value.
  Layout l({1000, 3, 5, 7, 1}, 4);
  EXPECT_EQ(l.total(), 1016u);
  uint64_t covered = 0;
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(l.shard(s).offset, covered);
    EXPECT_GE(l.shard(s).count, 1016u / 4);
    EXPECT_LE(l.shard(s).count, 1016u / 4 + 1);
    covered += l.shard(s).count;
  }
  EXPECT_EQ(covered, l.total());
}

TEST(Layout, ALargeKeyIsSplitAcrossServersAndPiecesSayWhereItsValuesSit) {
  Layout l({10, 10}, 4);  // shards of 5 values: key 0 on servers 0 and 1, key 1 on 2 and 3
  const std::vector<uint64_t> both = {0, 1};
  auto p1 = l.pieces(both, 1);
  ASSERT_EQ(p1.size(), 1u);
  EXPECT_EQ(p1[0].range, (Range{5, 5}));
  EXPECT_EQ(p1[0].at, 5u);
  const std::vector<uint64_t> only_second = {1};
  auto p2 = l.pieces(only_second, 2);
  ASSERT_EQ(p2.size(), 1u);
  EXPECT_EQ(p2[0].range, (Range{10, 5}));
  EXPECT_EQ(p2[0].at, 0u);  // the caller's buffer holds only key 1
  EXPECT_TRUE(l.pieces(only_second, 0).empty());
}

TEST(Layout, AdjacentKeysOnOneServerMakeOnePiece) {
  Layout l({3, 4, 5}, 1);
  const std::vector<uint64_t> keys = {0, 1, 2};
  auto p = l.pieces(keys, 0);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].range, (Range{0, 12}));
  // Out of order keys are pieces of their own, each where the caller has it.
  const std::vector<uint64_t> reversed = {2, 0};
  auto q = l.pieces(reversed, 0);
  ASSERT_EQ(q.size(), 2u);
  EXPECT_EQ(q[0].range, (Range{7, 5}));
  EXPECT_EQ(q[0].at, 0u);
  EXPECT_EQ(q[1].range, (Range{0, 3}));
  EXPECT_EQ(q[1].at, 5u);
}

TEST(Layout, MoreServersThanValuesLeavesSomeEmptyAndUnknownKeysAreErrors) {
  Layout l({2}, 4);
  int empty = 0;
  for (int s = 0; s < 4; ++s) empty += l.shard(s).count == 0;
  EXPECT_EQ(empty, 2);
  EXPECT_THROW(l.key_range(1), Error);
  const std::vector<uint64_t> bad = {0, 7};
  EXPECT_THROW(l.count(bad), Error);
  EXPECT_THROW(Layout({1}, 0), Error);
}

}  // namespace
}  // namespace cohort::ps
