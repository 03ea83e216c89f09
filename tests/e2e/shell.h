// Running a command the way a user would, for the end-to-end tests.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace cohort::e2e {

struct Result {
  int exit_code = -1;
  std::string output;
};

// Runs a shell command with a hard time limit (coreutils timeout), capturing stdout and stderr.
inline Result sh(const std::string& cmd, int limit_s = 240) {
  std::string full = "timeout -s KILL " + std::to_string(limit_s) + " " + cmd + " 2>&1";
  Result r;
  FILE* p = popen(full.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  int st = pclose(p);
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

}  // namespace cohort::e2e
