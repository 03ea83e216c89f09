#include "cohort/base/yaml_reader.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <set>

#include "cohort/base/error.h"

namespace cohort {
namespace {

std::string join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

// True when `path` is `prefix` or lies inside it ("train" covers "train.seed", "train[0]").
bool covers(const std::string& prefix, const std::string& path) {
  if (path.size() < prefix.size() || path.compare(0, prefix.size(), prefix) != 0) return false;
  return path.size() == prefix.size() || path[prefix.size()] == '.' || path[prefix.size()] == '[';
}

std::string last_component(const std::string& path) {
  auto dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

// A quoted scalar ('64' or "64") is a string even when it looks like a number.
bool is_plain_scalar(const YAML::Node& n) {
  return n.IsScalar() && n.Tag() != "!";
}

std::optional<int64_t> parse_int(const YAML::Node& n) {
  if (!is_plain_scalar(n)) return std::nullopt;
  std::string_view s = n.Scalar();
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

std::optional<double> parse_number(const YAML::Node& n) {
  if (!is_plain_scalar(n)) return std::nullopt;
  const std::string& s = n.Scalar();
  if (s.empty() || std::isspace(static_cast<unsigned char>(s.front()))) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || end != s.c_str() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string join_list(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace

std::string yaml_number(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, end);
}

size_t edit_distance(std::string_view a, std::string_view b) {
  // Optimal string alignment: Levenshtein plus adjacent transpositions ("bacth" -> "batch" is 1).
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

std::optional<std::string> closest_match(std::string_view word,
                                         const std::vector<std::string>& candidates) {
  // Close enough to be a typo: at most a third of the word wrong (at least one edit allowed), and
  // never a complete rewrite of a short word.
  const size_t limit = std::max<size_t>(1, word.size() / 3);
  std::optional<std::string> best;
  size_t best_d = 0;
  for (const auto& c : candidates) {
    size_t d = edit_distance(word, c);
    if (d <= limit && d < word.size() && (!best || d < best_d)) {
      best = c;
      best_d = d;
    }
  }
  return best;
}

YamlReader::YamlReader(std::string_view yaml, std::string source, const Schema* schema)
    : source_(std::move(source)), schema_(schema) {
  try {
    root_ = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    throw ConfigError(source_ + ":" + std::to_string(e.mark.line + 1) + ":" +
                      std::to_string(e.mark.column + 1) + ": invalid YAML: " + e.msg);
  }
}

void YamlReader::apply_override(const std::string& text) {
  auto bad = [&](const std::string& what) { throw ConfigError("--set " + text + ": " + what); };
  auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) bad("expected key.path=value");
  const std::string path = text.substr(0, eq);
  std::vector<std::string> keys;
  for (size_t start = 0;;) {
    auto dot = path.find('.', start);
    std::string key =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool ok = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
    });
    if (!ok) bad("'" + path + "' is not a key path (names separated by dots)");
    keys.push_back(key);
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  YAML::Node value;
  try {
    value = YAML::Load(text.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    bad("the value is not valid YAML: " + e.msg);
  }

  Override o{.text = text, .path = path, .created = {}};
  if (!root_.IsDefined() || root_.IsNull()) root_.reset(YAML::Node(YAML::NodeType::Map));
  if (!root_.IsMap()) bad("the job file is not a map of keys");
  // yaml-cpp nodes are handles: reset() rebinds `cur`, while `=` would overwrite its content.
  YAML::Node cur;
  cur.reset(root_);
  std::string walked;
  for (size_t i = 0; i + 1 < keys.size(); ++i) {
    walked = join(walked, keys[i]);
    YAML::Node next = cur[keys[i]];
    if (!next.IsDefined() || next.IsNull()) {
      cur[keys[i]] = YAML::Node(YAML::NodeType::Map);
      o.created.push_back(walked);
    } else if (!next.IsMap()) {
      bad("'" + walked + "' is " + describe(next) + ", not a map");
    }
    YAML::Node child = cur[keys[i]];
    cur.reset(child);
  }
  cur[keys.back()] = value;
  overrides_.push_back(std::move(o));
}

const YamlReader::Override* YamlReader::origin(const std::string& path) const {
  for (auto it = overrides_.rbegin(); it != overrides_.rend(); ++it) {
    if (covers(it->path, path)) return &*it;
    if (std::find(it->created.begin(), it->created.end(), path) != it->created.end()) return &*it;
  }
  return nullptr;
}

std::string YamlReader::where(const std::string& path, const YAML::Node& node) const {
  if (const Override* o = origin(path)) return "--set " + o->text;
  auto at = [&](const YAML::Mark& m) {
    return source_ + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
  };
  // An empty value ("workers:") has the position of whatever follows it: point at its key.
  if (!node.IsDefined() || node.IsNull()) {
    if (auto k = key_marks_.find(path); k != key_marks_.end()) return at(k->second);
  }
  if (node.IsDefined() && !node.Mark().is_null()) return at(node.Mark());
  return source_;
}

void YamlReader::fail(const std::string& path, const YAML::Node& node,
                      const std::string& what) const {
  throw ConfigError(where(path, node) + ": " + (path.empty() ? "" : path + ": ") + what);
}

YAML::Node YamlReader::child(const YAML::Node& map, const std::string& path) {
  const YAML::Node& m = map;  // const lookup never inserts
  if (!m.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
  return m[last_component(path)];
}

std::string YamlReader::describe(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "nothing";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a map";
  if (parse_number(n)) return n.Scalar();
  return quote(n.Scalar());
}

YAML::Node YamlReader::section(const YAML::Node& parent, const std::string& path) const {
  YAML::Node n = path.empty() ? parent : child(parent, path);
  if (!n.IsDefined() || n.IsNull()) return YAML::Node(YAML::NodeType::Map);
  if (!n.IsMap()) fail(path, n, "expected a map of keys, got " + describe(n));
  check_keys(n, path);
  return n;
}

std::string YamlReader::suggest(std::string_view key, const std::string& section) const {
  // The same key in exactly one other section (or in exactly one section below this one) is most
  // likely a misplaced key.
  std::vector<std::string> elsewhere, below;
  for (const auto& [sec, keys] : *schema_) {
    if (sec == section || std::find(keys.begin(), keys.end(), key) == keys.end()) continue;
    elsewhere.push_back(join(sec, key));
    if (!section.empty() && sec.starts_with(section + ".")) below.push_back(elsewhere.back());
  }
  if (elsewhere.size() == 1) return "; did you mean '" + elsewhere.front() + "'?";
  if (below.size() == 1) return "; did you mean '" + below.front() + "'?";
  const auto& allowed = schema_->at(section);
  if (auto m = closest_match(key, allowed)) return "; did you mean '" + *m + "'?";
  return "; valid keys: " + join_list(allowed);
}

void YamlReader::check_keys(const YAML::Node& map, const std::string& path) const {
  const auto& allowed = schema_->at(path);
  std::set<std::string> seen;
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (!it->first.IsScalar()) {
      fail(path, it->first, "keys must be names, got " + describe(it->first));
    }
    const std::string& key = it->first.Scalar();
    const std::string key_path = join(path, key);
    if (!seen.insert(key).second) fail(key_path, it->first, "duplicate key");
    key_marks_[key_path] = it->first.Mark();
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      fail(key_path, it->first, "unknown key" + suggest(key, path));
    }
  }
}

std::optional<int64_t> YamlReader::get_int(const YAML::Node& map, const std::string& path,
                                           int64_t lo, int64_t hi,
                                           std::string_view expected) const {
  YAML::Node n = child(map, path);
  if (!n.IsDefined()) return std::nullopt;
  auto v = parse_int(n);
  if (!v || *v < lo || *v > hi) {
    fail(path, n, "expected " + std::string(expected) + ", got " + describe(n));
  }
  return v;
}

std::optional<double> YamlReader::get_number(const YAML::Node& map, const std::string& path,
                                             double lo, bool lo_open, double hi, bool hi_open,
                                             std::string_view expected) const {
  YAML::Node n = child(map, path);
  if (!n.IsDefined()) return std::nullopt;
  return number_value(n, path, lo, lo_open, hi, hi_open, expected);
}

double YamlReader::number_value(const YAML::Node& n, const std::string& path, double lo,
                                bool lo_open, double hi, bool hi_open,
                                std::string_view expected) const {
  auto v = parse_number(n);
  bool ok = v && (lo_open ? *v > lo : *v >= lo) && (hi_open ? *v < hi : *v <= hi);
  if (!ok) fail(path, n, "expected " + std::string(expected) + ", got " + describe(n));
  return *v;
}

std::optional<bool> YamlReader::get_bool(const YAML::Node& map, const std::string& path) const {
  YAML::Node n = child(map, path);
  if (!n.IsDefined()) return std::nullopt;
  if (is_plain_scalar(n)) {
    const std::string& s = n.Scalar();
    if (s == "true" || s == "True" || s == "TRUE") return true;
    if (s == "false" || s == "False" || s == "FALSE") return false;
  }
  fail(path, n, "expected true or false, got " + describe(n));
}

std::optional<std::string> YamlReader::get_string(const YAML::Node& map,
                                                  const std::string& path) const {
  YAML::Node n = child(map, path);
  if (!n.IsDefined()) return std::nullopt;
  if (!n.IsScalar()) fail(path, n, "expected a string, got " + describe(n));
  return n.Scalar();
}

std::optional<std::string> YamlReader::get_choice(const YAML::Node& map, const std::string& path,
                                                  const std::vector<std::string>& choices) const {
  auto s = get_string(map, path);
  if (!s) return s;
  if (std::find(choices.begin(), choices.end(), *s) == choices.end()) {
    std::string what =
        "expected one of " + join_list(choices) + ", got " + describe(child(map, path));
    if (auto m = closest_match(*s, choices)) what += "; did you mean '" + *m + "'?";
    fail(path, child(map, path), what);
  }
  return s;
}

std::optional<std::vector<int64_t>> YamlReader::get_int_list(const YAML::Node& map,
                                                             const std::string& path, size_t count,
                                                             int64_t lo, int64_t hi,
                                                             std::string_view expected) const {
  YAML::Node n = child(map, path);
  if (!n.IsDefined()) return std::nullopt;
  if (!n.IsSequence() || n.size() != count) {
    fail(path, n,
         "expected " + std::string(expected) + ", got " + describe(n) +
             (n.IsSequence() ? " of " + std::to_string(n.size()) : ""));
  }
  std::vector<int64_t> out;
  for (size_t i = 0; i < n.size(); ++i) {
    YAML::Node e = n[i];
    auto v = parse_int(e);
    const std::string elem = path + "[" + std::to_string(i) + "]";
    if (!v || *v < lo || *v > hi) {
      fail(elem, e,
           "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
               describe(e));
    }
    out.push_back(*v);
  }
  return out;
}

}  // namespace cohort
