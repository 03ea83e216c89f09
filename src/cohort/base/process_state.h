// What Linux says a process of this machine is doing: the state letter of /proc/PID/stat.
#pragma once

#include <fstream>
#include <string>

namespace cohort {

// 'R' running, 'S' sleeping, 'D' uninterruptible sleep, 'T' stopped, 't' traced, 'Z' zombie, ...
// (proc(5)); '\0' when there is no such process.
inline char process_state(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(in, stat);
  // The state follows the command name, which is in parentheses and may itself hold any byte.
  const size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() ? stat[close + 2] : '\0';
}

}  // namespace cohort
