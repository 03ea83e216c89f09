#include "cohort/cli/args.h"

#include "cohort/base/error.h"

namespace cohort::cli {

Args::Args(int argc, char** argv, std::set<std::string> value_flags,
           std::set<std::string> bool_flags) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0 || a == "--") {
      positionals_.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    bool inline_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    if (bool_flags.count(name)) {
      if (inline_value) throw ConfigError("--" + name + " takes no value");
      values_[name].push_back("true");
    } else if (value_flags.count(name)) {
      if (!inline_value) {
        if (i + 1 >= argc) throw ConfigError("--" + name + " needs a value");
        value = argv[++i];
      }
      values_[name].push_back(value);
    } else {
      throw ConfigError("unknown option --" + name);
    }
  }
}

bool Args::has(const std::string& flag) const {
  return values_.count(flag) > 0;
}

std::optional<std::string> Args::get(const std::string& flag) const {
  auto it = values_.find(flag);
  if (it == values_.end()) return std::nullopt;
  return it->second.back();
}

std::string Args::get_or(const std::string& flag, const std::string& fallback) const {
  return get(flag).value_or(fallback);
}

std::vector<std::string> Args::all(const std::string& flag) const {
  auto it = values_.find(flag);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

long Args::get_int(const std::string& flag, long fallback) const {
  auto v = get(flag);
  if (!v) return fallback;
  try {
    size_t used = 0;
    long n = std::stol(*v, &used);
    if (used != v->size()) throw std::invalid_argument("trailing");
    return n;
  } catch (const std::exception&) {
    throw ConfigError("--" + flag + ": expected an integer, got '" + *v + "'");
  }
}

bool bind_to_cpus(const Args& args) {
  const std::string v = args.get_or("bind-to", "auto");
  if (v != "auto" && v != "none")
    throw ConfigError("--bind-to must be auto or none, got '" + v + "'");
  return v == "auto";
}

}  // namespace cohort::cli
