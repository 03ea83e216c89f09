// This machine's name, as workers report it to the coordinator (job/joined/<rank>, statuses).
#pragma once

#include <unistd.h>

#include <string>

namespace cohort {

// gethostname(), or "?" when it fails.
inline std::string host_name() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "?";
  return buf;
}

}  // namespace cohort
