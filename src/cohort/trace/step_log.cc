#include "cohort/trace/step_log.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "cohort/base/error.h"

namespace cohort::trace {

namespace fs = std::filesystem;
using nlohmann::json;

json to_json(const StepRecord& r) {
  json j = {{"type", "step"},
            {"step", r.step},
            {"epoch", r.epoch},
            {"world", r.world},
            {"end_us", r.end_us},
            {"data_s", r.data_s},
            {"compute_s", r.compute_s},
            {"sync_s", r.sync_s},
            {"ready_us", r.ready_us},
            {"sent_bytes", r.sent_bytes},
            {"collective_us", r.collective_us},
            {"collective_wait_us", r.collective_wait_us}};
  if (r.staleness >= 0) j["staleness"] = r.staleness;
  return j;
}

StepRecord step_from_json(const json& j) {
  return {.step = j.at("step").get<int64_t>(),
          .epoch = j.value("epoch", 0),
          .world = j.value("world", 1),
          .end_us = j.value("end_us", int64_t{0}),
          .data_s = j.at("data_s").get<double>(),
          .compute_s = j.at("compute_s").get<double>(),
          .sync_s = j.at("sync_s").get<double>(),
          .ready_us = j.value("ready_us", int64_t{0}),
          .sent_bytes = j.value("sent_bytes", uint64_t{0}),
          .collective_us = j.value("collective_us", int64_t{0}),
          .collective_wait_us = j.value("collective_wait_us", int64_t{0}),
          .staleness = j.value("staleness", int64_t{-1})};
}

json to_json(const RankHeader& h) {
  return {{"type", "rank"},
          {"rank", h.rank},
          {"world", h.world},
          {"clock_offset_us", h.clock_offset_us},
          {"probe_bytes", h.probe_bytes},
          {"probe_iterations", h.probe_iterations},
          {"probe_seconds", h.probe_seconds},
          {"probe_busbw_gbps", h.probe_busbw_gbps},
          {"algorithm", h.algorithm}};
}

RankHeader header_from_json(const json& j) {
  return {.rank = j.at("rank").get<int>(),
          .world = j.value("world", 1),
          .clock_offset_us = j.value("clock_offset_us", int64_t{0}),
          .probe_bytes = j.value("probe_bytes", uint64_t{0}),
          .probe_iterations = j.value("probe_iterations", 0),
          .probe_seconds = j.value("probe_seconds", 0.0),
          .probe_busbw_gbps = j.value("probe_busbw_gbps", 0.0),
          .algorithm = j.value("algorithm", std::string())};
}

StepLog::StepLog(const std::string& path) {
  fs::create_directories(fs::path(path).parent_path());
  out_.open(path, std::ios::app);
  if (!out_) throw Error("cannot open " + path + " for writing");
  thread_ = std::thread([this] { writer(); });
}

StepLog::~StepLog() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void StepLog::header(const RankHeader& h) {
  std::lock_guard lk(mu_);
  headers_.push_back(h);
}

void StepLog::append(const StepRecord& r) {
  std::lock_guard lk(mu_);
  pending_.push_back(r);
}

void StepLog::writer() {
  std::unique_lock lk(mu_);
  for (;;) {
    cv_.wait_for(lk, std::chrono::seconds(1), [this] { return stop_; });
    std::vector<RankHeader> headers;
    std::vector<StepRecord> steps;
    headers.swap(headers_);
    steps.swap(pending_);
    const bool stop = stop_;
    lk.unlock();
    std::vector<json> lines;
    lines.reserve(headers.size() + steps.size());
    for (const auto& h : headers) lines.push_back(to_json(h));
    for (const auto& s : steps) lines.push_back(to_json(s));
    write(lines);
    if (stop) return;
    lk.lock();
  }
}

void StepLog::write(const std::vector<json>& lines) {
  if (lines.empty()) return;
  std::string text;
  for (const auto& l : lines) text += l.dump() + "\n";
  out_ << text;
  out_.flush();
}

RankSteps read_step_log(const std::string& path, int rank) {
  RankSteps r;
  r.rank = rank;
  std::ifstream in(path);
  if (!in) throw Error("cannot read " + path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      json j = json::parse(line);
      if (j.value("type", "") == "rank") {
        r.header = header_from_json(j);
        r.has_header = true;
      } else {
        r.steps.push_back(step_from_json(j));
      }
    } catch (const std::exception&) {
      ++r.bad_lines;
    }
  }
  return r;
}

std::optional<int> rank_of_file(std::string_view name, std::string_view suffix) {
  constexpr std::string_view kPrefix = "rank-";
  if (name.size() <= kPrefix.size() + suffix.size() || !name.starts_with(kPrefix) ||
      !name.ends_with(suffix)) {
    return std::nullopt;
  }
  const std::string_view digits =
      name.substr(kPrefix.size(), name.size() - kPrefix.size() - suffix.size());
  if (digits.size() > 9) return std::nullopt;
  int n = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
  }
  return n;
}

std::vector<RankSteps> read_step_logs(const std::string& run_dir) {
  std::vector<RankSteps> out;
  const fs::path dir = fs::path(run_dir) / "steps";
  if (!fs::is_directory(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir)) {
    auto rank = rank_of_file(e.path().filename().string(), ".jsonl");
    if (rank) out.push_back(read_step_log(e.path().string(), *rank));
  }
  std::sort(out.begin(), out.end(),
            [](const RankSteps& a, const RankSteps& b) { return a.rank < b.rank; });
  return out;
}

}  // namespace cohort::trace
