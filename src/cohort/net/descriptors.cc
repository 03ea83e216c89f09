#include "cohort/net/descriptors.h"

#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <algorithm>

namespace cohort::net {

void ensure_descriptors(size_t needed, const std::string& who) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur >= needed) return;
  const rlim_t want =
      lim.rlim_max == RLIM_INFINITY ? needed : std::min<rlim_t>(needed, lim.rlim_max);
  if (want > lim.rlim_cur) {
    const rlim_t before = lim.rlim_cur;
    lim.rlim_cur = want;
    if (::setrlimit(RLIMIT_NOFILE, &lim) == 0) {
      spdlog::info("{}: raised the open-file limit from {} to {}", who, before, want);
    }
  }
  if (want < needed) {
    spdlog::warn(
        "{}: this process may open only {} files (hard limit) but needs about {}; raise it "
        "(ulimit -Hn, or LimitNOFILE= for a service)",
        who, want, needed);
  }
}

}  // namespace cohort::net
