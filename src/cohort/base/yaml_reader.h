// Strict, located reading of a YAML tree against a schema: the machinery under the job config and
// the simulator's profiles (JSON is read as the YAML it is a subset of, so its errors are located too).
//
// A YamlReader knows where every value came from (file:line:column, or the --set override that
// put it there) and raises ConfigErrors of the form "<where>: <key path>: <what is wrong>".
// Typed getters reject wrong types (a quoted "64" is a string, not an integer) and out-of-range
// values; check_keys() rejects keys the schema does not list and suggests the closest valid one.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cohort {

// Section path ("" for the root, "train.optimizer", ...) -> the keys it may hold.
using Schema = std::map<std::string, std::vector<std::string>, std::less<>>;

// The shortest text that reads back as the same double (how numbers are written back).
std::string yaml_number(double v);

// Optimal-string-alignment edit distance (insertions, deletions, substitutions, transpositions).
size_t edit_distance(std::string_view a, std::string_view b);
// The candidate closest to `word`, if it is close enough to be a plausible typo.
std::optional<std::string> closest_match(std::string_view word,
                                         const std::vector<std::string>& candidates);

class YamlReader {
 public:
  // `source` names the text in messages (a file name). Parses it; syntax errors are located.
  YamlReader(std::string_view yaml, std::string source, const Schema* schema);

  // Applies "a.b.c=value" to the tree: the value is parsed as YAML; missing maps on the way are
  // created. Errors are reported as "--set a.b.c=value: ...".
  void apply_override(const std::string& text);

  const YAML::Node& root() const { return root_; }

  // The location of the value at `path` ("train.batch_size"): the --set override that set it or
  // created a map on its way, else file:line:column of `node`, else the file name alone.
  std::string where(const std::string& path, const YAML::Node& node) const;
  [[noreturn]] void fail(const std::string& path, const YAML::Node& node,
                         const std::string& what) const;

  // A map section: null or absent reads as an empty map; anything else is an error. Keys are
  // checked against schema[path].
  YAML::Node section(const YAML::Node& parent, const std::string& path) const;
  void check_keys(const YAML::Node& map, const std::string& path) const;

  // Typed values. Each returns nullopt when the key is absent, so the caller keeps its default.
  std::optional<int64_t> get_int(const YAML::Node& map, const std::string& path, int64_t lo,
                                 int64_t hi, std::string_view expected) const;
  // A finite number in the range lo..hi; the ends are open or closed as given.
  std::optional<double> get_number(const YAML::Node& map, const std::string& path, double lo,
                                   bool lo_open, double hi, bool hi_open,
                                   std::string_view expected) const;
  // The same check on a node already in hand (a list element).
  double number_value(const YAML::Node& node, const std::string& path, double lo, bool lo_open,
                      double hi, bool hi_open, std::string_view expected) const;
  std::optional<bool> get_bool(const YAML::Node& map, const std::string& path) const;
  std::optional<std::string> get_string(const YAML::Node& map, const std::string& path) const;
  // One of `choices`; a near miss gets "did you mean ...?".
  std::optional<std::string> get_choice(const YAML::Node& map, const std::string& path,
                                        const std::vector<std::string>& choices) const;
  // A list of exactly `count` integers in lo..hi.
  std::optional<std::vector<int64_t>> get_int_list(const YAML::Node& map, const std::string& path,
                                                   size_t count, int64_t lo, int64_t hi,
                                                   std::string_view expected) const;

  // The child node of `map` at `path`'s last component (undefined if absent).
  static YAML::Node child(const YAML::Node& map, const std::string& path);
  // How a value reads in an error: 64, "sixty", nothing, a list, a map.
  static std::string describe(const YAML::Node& node);

 private:
  struct Override {
    std::string text;
    std::string path;
    std::vector<std::string> created;  // paths of maps this override created
  };
  const Override* origin(const std::string& path) const;
  std::string suggest(std::string_view key, const std::string& section) const;

  std::string source_;
  const Schema* schema_;
  YAML::Node root_;
  std::vector<Override> overrides_;
  // Where each key checked so far stands in the file, for errors about empty values.
  mutable std::map<std::string, YAML::Mark> key_marks_;
};

}  // namespace cohort
