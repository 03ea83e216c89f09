// Files and directories for the end-to-end tests.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace cohort::e2e {

// An empty directory of its own under the temporary directory: cohort-PREFIX-NAME-PID.
inline std::filesystem::path fresh_dir(const std::string& prefix, const std::string& name) {
  auto d = std::filesystem::temp_directory_path() /
           ("cohort-" + prefix + "-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

// A whole file; empty if it cannot be read.
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace cohort::e2e
