// How many CPUs this process may run on (its affinity mask): what the peer harnesses report as
// cpus_per_rank, so a reader sees whether each side's ranks were bound. Header-only, no Cohort.
#pragma once

#include <sched.h>

inline int cpus_of_this_process() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
}
