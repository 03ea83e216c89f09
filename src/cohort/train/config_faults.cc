// The job file's faults list: config.h, "faults".
#include <set>

#include "cohort/train/config_reading.h"

namespace cohort::train::config_detail {
namespace {

constexpr auto kFaultKinds = {FaultKind::Kill, FaultKind::Hang, FaultKind::Slow,
                              FaultKind::Disconnect, FaultKind::Stragglers};

// seconds, factor and every: which apply, and which a kind needs, depend on the kind.
void read_fault_amounts(const YamlReader& r, const YAML::Node& m, const std::string& at,
                        const std::string& when, FaultConfig& f) {
  const bool slow = f.kind == FaultKind::Slow, stragglers = f.kind == FaultKind::Stragglers;
  const char* factor_range = "a number in (1, 1000]";
  if (slow || stragglers) {
    if (auto v = r.get_number(m, at + ".factor", 1, true, 1000, false, factor_range)) {
      f.factor = *v;
    }
  } else {
    reject_if_present(r, m, at + ".factor", when + " (only to slow and stragglers)");
  }
  if (stragglers) {
    auto every = r.get_int(m, at + ".every", 1, 1 << 20, "an integer in [1, 1048576]");
    if (!every || f.factor == 0) {
      r.fail(at, m, "a stragglers fault needs every (the window in steps) and factor");
    }
    f.every = *every;
  } else {
    reject_if_present(r, m, at + ".every", when + " (only to stragglers)");
  }
  if (slow) {
    if (auto s = r.get_number(m, at + ".seconds", 0, true, 3600, false,
                              "a number of seconds in (0, 3600]")) {
      if (f.factor > 0)
        r.fail(at + ".seconds", YamlReader::child(m, at + ".seconds"),
               "a slow fault takes seconds or factor, not both");
      f.seconds = *s;
    } else if (f.factor == 0) {
      r.fail(at, m,
             "a slow fault needs seconds (the time each step takes longer) or factor (how many "
             "times its compute each step takes)");
    }
  } else if (f.kind == FaultKind::Hang) {
    if (auto s = r.get_number(m, at + ".seconds", 0, false, 86400, false,
                              "a number of seconds in [0, 86400] (0: for good)")) {
      f.seconds = *s;
    }
  } else {
    reject_if_present(r, m, at + ".seconds", when + " (only to slow and hang)");
  }
}

}  // namespace

void read_faults(const YamlReader& r, const YAML::Node& root, int64_t workers,
                 std::vector<FaultConfig>& out) {
  YAML::Node list = YamlReader::child(root, "faults");
  if (!list.IsDefined() || list.IsNull()) return;
  if (!list.IsSequence()) {
    r.fail("faults", list, "expected a list of faults, got " + YamlReader::describe(list));
  }
  const std::vector<std::string>& allowed = schema().at("faults[]");
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string at = "faults[" + std::to_string(i) + "]";
    YAML::Node m = list[i];
    if (!m.IsMap())
      r.fail(at, m,
             "expected a map {kind, rank, at_step, seconds, factor, every}, got " +
                 YamlReader::describe(m));
    std::set<std::string> seen;
    for (auto it = m.begin(); it != m.end(); ++it) {
      const std::string key = it->first.IsScalar() ? it->first.Scalar() : "?";
      if (!seen.insert(key).second) r.fail(at + "." + key, it->first, "duplicate key");
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        auto near = closest_match(key, allowed);
        r.fail(at + "." + key, it->first,
               "unknown key" + (near ? "; did you mean '" + *near + "'?" : std::string()));
      }
    }
    FaultConfig f;
    auto kind = r.get_choice(m, at + ".kind", names(kFaultKinds, fault_kind_name));
    if (!kind) r.fail(at, m, "a fault needs a kind (kill, hang, slow, disconnect or stragglers)");
    f.kind = parse_enum(*kind, kFaultKinds, fault_kind_name);
    const std::string when = "when the kind is " + *kind;
    if (f.kind == FaultKind::Stragglers) {
      reject_if_present(r, m, at + ".rank", when + " (the worker is chosen at random)");
    } else {
      auto rank = r.get_int(m, at + ".rank", 0, workers - 1,
                            "a rank in [0, " + std::to_string(workers - 1) + "] (workers is " +
                                std::to_string(workers) + ")");
      if (!rank) r.fail(at, m, "a fault needs the rank it happens on");
      f.rank = *rank;
    }
    if (auto v = r.get_int(m, at + ".at_step", 0, kMaxInt, "a non-negative integer")) {
      f.at_step = *v;
    }
    read_fault_amounts(r, m, at, when, f);
    out.push_back(f);
  }
}

}  // namespace cohort::train::config_detail
