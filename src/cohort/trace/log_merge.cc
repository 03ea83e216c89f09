#include "cohort/trace/log_merge.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string_view>

#include "cohort/base/error.h"
#include "cohort/trace/step_log.h"

namespace cohort::trace {

namespace fs = std::filesystem;

namespace {

struct Line {
  std::string time;  // "2026-11-30T09:30:32.123": sorts as text
  int source = 0;    // launcher -1, then ranks
  size_t order = 0;  // within its file
  std::string text;
};

// Whether the line starts with "YYYY-MM-DDTHH:MM:SS.mmm ".
bool has_time(const std::string& s) {
  static constexpr std::string_view kShape = "dddd-dd-ddTdd:dd:dd.ddd ";
  if (s.size() <= kShape.size()) return false;
  for (size_t i = 0; i < kShape.size(); ++i) {
    const bool digit = s[i] >= '0' && s[i] <= '9';
    if (kShape[i] == 'd' ? !digit : s[i] != kShape[i]) return false;
  }
  return true;
}

void read_lines(const fs::path& path, int source, std::vector<Line>& out) {
  std::ifstream in(path);
  if (!in) throw Error("cannot read " + path.string());
  std::string s, time;
  size_t order = 0;
  const std::string rank_tag = "[r" + std::to_string(source) + "]";
  while (std::getline(in, s)) {
    if (has_time(s)) {
      time = s.substr(0, 23);
      // "<time> <level> [-] ...": a worker's line from before it had its rank.
      if (source >= 0) {
        auto at = s.find(" [-] ", 23);
        if (at != std::string::npos && at <= 40) s.replace(at + 1, 3, rank_tag);
      }
    }
    out.push_back({time, source, order++, std::move(s)});
  }
}

}  // namespace

bool is_run_dir(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_directory(fs::path(path) / "logs", ec);
}

std::vector<std::string> merge_logs(const std::string& run_dir, std::optional<int> rank) {
  const fs::path dir = fs::path(run_dir) / "logs";
  if (!fs::is_directory(dir))
    throw Error(run_dir + " has no logs/ directory (not a run directory)");
  std::vector<Line> lines;
  bool found = false;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string f = e.path().filename().string();
    if (f == "launcher.log") {
      if (rank) continue;
      read_lines(e.path(), -1, lines);
    } else if (auto r = rank_of_file(f, ".log")) {
      if (rank && *rank != *r) continue;
      found = true;
      read_lines(e.path(), *r, lines);
    }
  }
  if (rank && !found) {
    throw Error("no log of rank " + std::to_string(*rank) + " in " + dir.string());
  }
  std::stable_sort(lines.begin(), lines.end(), [](const Line& a, const Line& b) {
    if (a.time != b.time) return a.time < b.time;
    if (a.source != b.source) return a.source < b.source;
    return a.order < b.order;
  });
  std::vector<std::string> out;
  out.reserve(lines.size());
  for (auto& l : lines) out.push_back(std::move(l.text));
  return out;
}

}  // namespace cohort::trace
