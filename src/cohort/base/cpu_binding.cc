#include "cohort/base/cpu_binding.h"

#include <cerrno>
#include <cstdlib>

namespace cohort {

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return {0};
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  if (cpus.empty()) cpus.push_back(0);
  return cpus;
}

int allowed_cpu_count() {
  return static_cast<int>(allowed_cpus().size());
}

std::vector<int> cpu_share(const std::vector<int>& cpus, int index, int count) {
  const int n = static_cast<int>(cpus.size());
  if (count <= 0 || index < 0 || index >= count || count > n) return {};
  const int each = n / count;
  const int extra = n % count;
  const int begin = index * each + (index < extra ? index : extra);
  const int size = each + (index < extra ? 1 : 0);
  return {cpus.begin() + begin, cpus.begin() + begin + size};
}

int host_cpus_from_environment() {
  const char* v = std::getenv(kHostCpusVariable);
  if (v == nullptr) return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return end != v && *end == '\0' && n > 0 && n <= CPU_SETSIZE ? static_cast<int>(n) : 0;
}

CpuMask::CpuMask(const std::vector<int>& cpus) {
  CPU_ZERO(&set_);
  for (int c : cpus) {
    if (c >= 0 && c < CPU_SETSIZE && !CPU_ISSET(c, &set_)) {
      CPU_SET(c, &set_);
      ++count_;
    }
  }
}

int CpuMask::apply() const noexcept {
  if (count_ == 0) return 0;
  return sched_setaffinity(0, sizeof(set_), &set_) == 0 ? 0 : errno;
}

}  // namespace cohort
