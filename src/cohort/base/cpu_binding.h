// Binding the processes that one launcher starts on this host to CPUs, the way mpirun does by
// default (Open MPI 4.1: each process to a core of its own while there are at most as many
// processes as CPUs; unbound on an oversubscribed host, where the scheduler must move them).
//
// Why it matters for the communicator: two ranks that poll shared memory for each other need a
// CPU each. Unbound, a wake-up through the doorbell lets the kernel move the woken rank next to
// its waker (wake-affine), and two polling ranks on one CPU take turns until the load balancer
// parts them again, milliseconds later.
#pragma once

#include <sched.h>

#include <vector>

namespace cohort {

// The CPUs this process may run on (its affinity mask, which cgroup cpusets and taskset narrow),
// in increasing order; {0} if the mask cannot be read.
std::vector<int> allowed_cpus();

// How many CPUs this process may run on (allowed_cpus().size()).
int allowed_cpu_count();

// The CPUs of process `index` of `count` started together on `cpus`: a contiguous, disjoint share,
// cpus.size() / count each and one more for the first cpus.size() % count. Empty (leave it
// unbound) when there are more processes than CPUs or `index` is not in [0, count).
std::vector<int> cpu_share(const std::vector<int>& cpus, int index, int count);

// The variable in which a launcher that bound this process to a share of the host's CPUs says
// how many CPUs it shared out among the host's ranks (CommConfig::host_cpus).
inline constexpr const char* kHostCpusVariable = "COHORT_HOST_CPUS";
// Its value; 0 when unset or not a count of CPUs.
int host_cpus_from_environment();

// A set of CPUs made ready before fork(), which the child applies to itself with one system call
// (async-signal-safe), before exec: every thread it ever starts inherits it.
class CpuMask {
 public:
  CpuMask() = default;
  explicit CpuMask(const std::vector<int>& cpus);
  bool empty() const { return count_ == 0; }
  int count() const { return count_; }
  // sched_setaffinity of the calling thread: 0, or the errno. Does nothing for an empty mask.
  int apply() const noexcept;

 private:
  cpu_set_t set_{};
  int count_ = 0;
};

}  // namespace cohort
