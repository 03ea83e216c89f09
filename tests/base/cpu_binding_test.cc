#include "cohort/base/cpu_binding.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

namespace cohort {
namespace {

TEST(CpuShare, SplitsTheCpusIntoContiguousDisjointShares) {
  const std::vector<int> four = {0, 1, 2, 3};
  EXPECT_EQ(cpu_share(four, 0, 2), (std::vector<int>{0, 1}));
  EXPECT_EQ(cpu_share(four, 1, 2), (std::vector<int>{2, 3}));
  EXPECT_EQ(cpu_share(four, 3, 4), (std::vector<int>{3}));
  EXPECT_EQ(cpu_share(four, 0, 1), four);
  // The first ones get one more when the count does not divide; every CPU is in one share.
  const std::vector<int> five = {0, 1, 2, 3, 4};
  EXPECT_EQ(cpu_share(five, 0, 2), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(cpu_share(five, 1, 2), (std::vector<int>{3, 4}));
  std::vector<int> seen;
  for (int i = 0; i < 3; ++i) {
    for (int c : cpu_share(five, i, 3)) seen.push_back(c);
  }
  EXPECT_EQ(seen, five);
}

TEST(CpuShare, KeepsTheIdsOfAnAllowedSetWithHoles) {
  // A cpuset of 2, 5, 6, 9 (taskset, a container): shares name those CPUs, not 0..3.
  const std::vector<int> cpus = {2, 5, 6, 9};
  EXPECT_EQ(cpu_share(cpus, 0, 2), (std::vector<int>{2, 5}));
  EXPECT_EQ(cpu_share(cpus, 1, 2), (std::vector<int>{6, 9}));
}

TEST(CpuShare, LeavesAnOversubscribedHostOrABadIndexUnbound) {
  const std::vector<int> two = {0, 1};
  EXPECT_TRUE(cpu_share(two, 0, 3).empty());
  EXPECT_TRUE(cpu_share(two, 2, 2).empty());
  EXPECT_TRUE(cpu_share(two, -1, 2).empty());
  EXPECT_TRUE(cpu_share(two, 0, 0).empty());
}

TEST(CpuMask, ABoundChildRunsOnItsShareOnly) {
  const std::vector<int> cpus = allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  EXPECT_EQ(allowed_cpu_count(), static_cast<int>(cpus.size()));
  const std::vector<int> mine = {cpus.back()};
  const CpuMask mask(mine);
  EXPECT_EQ(mask.count(), 1);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (mask.apply() != 0) _exit(10);
    _exit(allowed_cpus() == mine ? 0 : 11);
  }
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0) << "10: sched_setaffinity failed, 11: the mask is not the share";
  // This process is untouched, and an empty mask changes nothing.
  EXPECT_EQ(allowed_cpus(), cpus);
  EXPECT_EQ(CpuMask().apply(), 0);
  EXPECT_EQ(allowed_cpus(), cpus);
}

TEST(CpuMask, ACpuTheKernelDoesNotAllowIsAnError) {
  // CPU_SETSIZE - 1 exists on no machine this runs on: the kernel refuses a mask of it alone.
  const CpuMask impossible(std::vector<int>{CPU_SETSIZE - 1});
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) _exit(impossible.apply() == EINVAL ? 0 : 1);
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

}  // namespace
}  // namespace cohort
