// What the readers of the job file's sections share (config.cc, config_sync.cc,
// config_faults.cc). Not a public header.
#pragma once

#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/base/yaml_reader.h"
#include "cohort/train/config.h"

namespace cohort::train::config_detail {

inline constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();
inline constexpr double kInf = std::numeric_limits<double>::infinity();

// Every key of the job file, by section.
const Schema& schema();

template <typename E>
inline std::vector<std::string> names(std::initializer_list<E> all, std::string_view (*name)(E)) {
  std::vector<std::string> out;
  for (E e : all) out.emplace_back(name(e));
  return out;
}

template <typename E>
inline E parse_enum(const std::string& s, std::initializer_list<E> all,
                    std::string_view (*name)(E)) {
  for (E e : all) {
    if (name(e) == s) return e;
  }
  throw ConfigError("internal: unchecked choice " + s);  // get_choice() checked it
}

// A key that only applies to some settings of another key must not be silently ignored.
inline void reject_if_present(const YamlReader& r, const YAML::Node& map, const std::string& path,
                              const std::string& why) {
  YAML::Node n = YamlReader::child(map, path);
  if (n.IsDefined()) r.fail(path, n, "does not apply " + why);
}

// sync: the mode and the keys of that mode; another mode's keys are errors. Reads
// parameter_servers too (it belongs to ssp and async).
void read_sync(const YamlReader& r, const YAML::Node& root, JobConfig& c);
// faults: a list of maps; element i's keys are named faults[i].key in errors.
void read_faults(const YamlReader& r, const YAML::Node& root, int64_t workers,
                 std::vector<FaultConfig>& out);

}  // namespace cohort::train::config_detail
