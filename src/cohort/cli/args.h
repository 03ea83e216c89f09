// A small command-line reader shared by the subcommands: --flag VALUE, --flag=VALUE, repeated
// flags, and positionals. Errors are ConfigErrors that name the flag.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace cohort::cli {

class Args {
 public:
  // `value_flags` take a value; `bool_flags` do not. Anything else starting with "--" is an error.
  Args(int argc, char** argv, std::set<std::string> value_flags, std::set<std::string> bool_flags);

  bool has(const std::string& flag) const;
  std::optional<std::string> get(const std::string& flag) const;  // the last occurrence
  std::string get_or(const std::string& flag, const std::string& fallback) const;
  std::vector<std::string> all(const std::string& flag) const;  // every occurrence, in order
  long get_int(const std::string& flag, long fallback) const;
  const std::vector<std::string>& positionals() const { return positionals_; }

 private:
  std::map<std::string, std::vector<std::string>> values_;
  std::vector<std::string> positionals_;
};

// The launchers' --bind-to auto|none (base/cpu_binding.h): true for auto, the default.
bool bind_to_cpus(const Args& args);

}  // namespace cohort::cli
