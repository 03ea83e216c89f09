#include "cohort/trace/tracer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cohort/base/error.h"
#include "cohort/base/file.h"

namespace cohort::trace {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr uint32_t kClockTag = 0x434c4b53;  // "CLKS": the clock ping-pong's send/recv tag

std::string peers_text(uint64_t mask) {
  std::string s;
  for (int r = 0; r < 64; ++r) {
    if (!(mask & (uint64_t{1} << r))) continue;
    if (!s.empty()) s.push_back(',');
    s.append(std::to_string(r));
  }
  return s;
}

}  // namespace

Tracer::Tracer(const TracerOptions& options) : options_(options) {
  fs::create_directories(fs::path(options_.path).parent_path());
  out_.open(options_.path, std::ios::binary | std::ios::trunc);
  if (!out_) throw SystemError("cannot write the trace file " + options_.path, errno);
  json other{
      {"rank", options_.rank}, {"clock_offset_us", options_.clock_offset_us}, {"writer", "cohort"}};
  out_ << "{\"otherData\": " << other.dump() << ",\n\"traceEvents\": [\n";
  json meta = json::array({{{"ph", "M"},
                            {"pid", options_.rank},
                            {"tid", 0},
                            {"name", "process_name"},
                            {"args", {{"name", "rank " + std::to_string(options_.rank)}}}},
                           {{"ph", "M"},
                            {"pid", options_.rank},
                            {"tid", 0},
                            {"name", "thread_name"},
                            {"args", {{"name", "training"}}}},
                           {{"ph", "M"},
                            {"pid", options_.rank},
                            {"tid", 1},
                            {"name", "thread_name"},
                            {"args", {{"name", "communication"}}}}});
  for (const auto& m : meta) {
    out_ << (first_ ? "" : ",\n") << m.dump();
    first_ = false;
  }
  pending_.reserve(1024);
  phase_start_us_ = comm::now_us();
  thread_ = std::thread([this] { writer(); });
}

Tracer::~Tracer() {
  phase(phase_step_, comm::Phase::Done);  // closes the open span
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  if (uint64_t d = dropped()) {
    spdlog::warn("trace: {} events dropped (the writer fell behind)", d);
    out_ << ",\n"
         << json{{"ph", "M"},
                 {"pid", options_.rank},
                 {"tid", 0},
                 {"name", "cohort_dropped_events"},
                 {"args", {{"count", d}}}}
                .dump();
  }
  out_ << "\n]}\n";
  out_.close();
}

void Tracer::push(Event e) {
  {
    std::lock_guard lk(mu_);
    if (pending_.size() >= options_.max_pending) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    pending_.push_back(std::move(e));
  }
}

void Tracer::phase(int64_t step, comm::Phase p) {
  const int64_t now = comm::now_us();
  if (phase_ != comm::Phase::Setup && phase_ != comm::Phase::Done) {
    push(Event{.ph = 'X',
               .tid = 0,
               .ts_us = phase_start_us_,
               .dur_us = now - phase_start_us_,
               .name = std::string(comm::phase_name(phase_)),
               .cat = "step",
               .args = "{\"step\":" + std::to_string(phase_step_) + "}"});
  }
  phase_ = p;
  phase_step_ = step;
  phase_start_us_ = now;
}

void Tracer::instant(std::string name, uint64_t bytes) {
  push(Event{.ph = 'i',
             .tid = 0,
             .ts_us = comm::now_us(),
             .name = std::move(name),
             .cat = "ddp",
             .args = "{\"bytes\":" + std::to_string(bytes) + "}"});
}

void Tracer::on_collective(const comm::CollectiveRecord& r) {
  const std::string name = std::string(comm::op_kind_name(r.kind)) + " #" + std::to_string(r.seq);
  if (r.started_us <= 0) {
    // Failed or given up (an abort) while still queued: an instant when it ended, not a span from
    // the clock's zero.
    json args{{"seq", r.seq},
              {"count", r.count},
              {"bytes", r.bytes()},
              {"state", comm::collective_state_name(r.state)}};
    if (!r.label.empty()) args["label"] = r.label;
    push(Event{.ph = 'i',
               .tid = 1,
               .ts_us = r.finished_us > 0 ? r.finished_us : r.queued_us,
               .name = name + " (never started)",
               .cat = "comm",
               .args = args.dump()});
    return;
  }
  const int64_t dur = std::max<int64_t>(0, r.finished_us - r.started_us);
  json args{{"seq", r.seq},
            {"algorithm", comm::algorithm_name(r.algorithm)},
            {"dtype", dtype_name(r.dtype)},
            {"count", r.count},
            {"bytes", r.bytes()},
            {"sent_bytes", r.sent_bytes},
            {"peers", peers_text(r.peers)},
            {"queued_ms", static_cast<double>(r.started_us - r.queued_us) / 1e3},
            {"wait_ms", static_cast<double>(r.wait_us) / 1e3},
            {"reduce_ms", static_cast<double>(r.reduce_us) / 1e3},
            {"transfer_ms",
             static_cast<double>(std::max<int64_t>(0, dur - r.wait_us - r.reduce_us)) / 1e3},
            {"state", comm::collective_state_name(r.state)}};
  if (!r.label.empty()) args["label"] = r.label;
  push(Event{.ph = 'X',
             .tid = 1,
             .ts_us = r.started_us,
             .dur_us = dur,
             .name = name,
             .cat = "comm",
             .args = args.dump()});
}

void Tracer::writer() {
  std::vector<Event> batch;
  batch.reserve(1024);
  for (;;) {
    bool stop;
    {
      std::unique_lock lk(mu_);
      cv_.wait_for(lk, std::chrono::milliseconds(200), [&] { return stop_; });
      batch.swap(pending_);
      stop = stop_;
    }
    write_events(batch);
    batch.clear();
    if (stop) return;
  }
}

void Tracer::write_events(const std::vector<Event>& events) {
  std::string buf;
  for (const Event& e : events) {
    json j{{"ph", std::string(1, e.ph)},
           {"pid", options_.rank},
           {"tid", e.tid},
           {"ts", e.ts_us},
           {"name", e.name},
           {"cat", e.cat}};
    if (e.ph == 'X') j["dur"] = e.dur_us;
    if (e.ph == 'i') j["s"] = "t";
    if (!first_) buf.append(",\n");
    first_ = false;
    buf += j.dump();
    if (!e.args.empty()) {
      buf.pop_back();  // the closing brace: splice the already rendered args in
      buf.append(",\"args\":").append(e.args).push_back('}');
    }
  }
  out_ << buf;
  out_.flush();
}

int64_t measure_clock_offset(comm::Communicator& comm, int rounds) {
  const int n = comm.size(), me = comm.rank();
  if (n == 1) return 0;
  int64_t word = 0;
  Buffer buf{DType::I64, &word, 1};
  if (me == 0) {
    for (int r = 1; r < n; ++r) {
      for (int k = 0; k < rounds; ++k) {
        comm.recv(buf, r, {.tag = kClockTag})->wait();
        word = comm::now_us();
        comm.send(buf, r, {.tag = kClockTag})->wait();
      }
    }
    return 0;
  }
  int64_t best_rtt = std::numeric_limits<int64_t>::max(), offset = 0;
  for (int k = 0; k < rounds; ++k) {
    const int64_t t0 = comm::now_us();
    word = t0;
    comm.send(buf, 0, {.tag = kClockTag})->wait();
    comm.recv(buf, 0, {.tag = kClockTag})->wait();
    const int64_t t1 = comm::now_us();
    if (t1 - t0 < best_rtt) {
      best_rtt = t1 - t0;
      offset = word - (t0 + t1) / 2;
    }
  }
  return offset;
}

namespace {

// A rank's file; one whose writer died mid-run lacks its closing "]}".
json read_rank_file(const fs::path& p) {
  std::string text = read_file(p);
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) {
    while (!text.empty() && (text.back() == '\n' || text.back() == ',' || text.back() == ' ')) {
      text.pop_back();
    }
    j = json::parse(text + "\n]}", nullptr, false);
  }
  if (j.is_discarded() || !j.contains("traceEvents") || !j["traceEvents"].is_array()) {
    throw Error(p.string() + ": not a Cohort trace file");
  }
  return j;
}

}  // namespace

int merge_traces(const std::string& run_dir) {
  const fs::path dir = fs::path(run_dir) / "trace";
  if (!fs::is_directory(dir)) {
    throw Error("no traces in " + run_dir + " (run the job with trace: {enabled: true})");
  }
  std::map<int, json> ranks;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("rank-", 0) != 0 || entry.path().extension() != ".json") continue;
    json j = read_rank_file(entry.path());
    const int rank = j.contains("otherData") ? j["otherData"].value("rank", -1) : -1;
    if (rank < 0) throw Error(entry.path().string() + ": no rank in otherData");
    ranks[rank] = std::move(j);
  }
  if (ranks.empty()) throw Error("no rank-*.json files in " + dir.string());
  json events = json::array();
  json offsets = json::object();
  for (auto& [rank, j] : ranks) {
    const int64_t offset = j["otherData"].value("clock_offset_us", int64_t{0});
    offsets[std::to_string(rank)] = offset;
    events.push_back({{"ph", "M"},
                      {"pid", rank},
                      {"tid", 0},
                      {"name", "process_sort_index"},
                      {"args", {{"sort_index", rank}}}});
    for (auto& e : j["traceEvents"]) {
      e["pid"] = rank;
      if (e.contains("ts")) e["ts"] = e["ts"].get<int64_t>() + offset;
      events.push_back(std::move(e));
    }
  }
  json out{{"traceEvents", std::move(events)},
           {"displayTimeUnit", "ms"},
           {"otherData", {{"ranks", ranks.size()}, {"clock_offsets_us", offsets}}}};
  write_file_atomically(fs::path(run_dir) / "trace.json", out.dump() + "\n");
  return static_cast<int>(ranks.size());
}

}  // namespace cohort::trace
