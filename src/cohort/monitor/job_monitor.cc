#include "cohort/monitor/job_monitor.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <map>

#include "cohort/base/clock.h"
#include "cohort/base/histogram.h"
#include "cohort/base/json_number.h"

namespace cohort::monitor {

using nlohmann::json;

namespace {

const char* const kWorkerStates[] = {"waiting",  "joined", "training", "evaluating",
                                     "finished", "failed", "exited"};

bool is_finished(const std::string& state) {
  return state == "completed" || state == "failed" || state == "cancelled";
}

// Label values escape backslash, double quote and newline (exposition format 0.0.4).
std::string label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  // The shortest text that reads back, in %g's style (0.0005, not 5e-04), as Prometheus's own
  // clients write bucket bounds.
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::general);
  return std::string(buf, end);
}

// Adds a histogram a worker published ({"counts": [one per bucket], "sum": s}); anything else is
// ignored (a worker of another version).
void add_histogram(LatencyHistogram& into, const json& h) {
  if (!h.is_object() || !h.contains("counts") || !h["counts"].is_array() ||
      h["counts"].size() != LatencyHistogram::kBuckets) {
    return;
  }
  for (size_t i = 0; i < LatencyHistogram::kBuckets; ++i) {
    into.add_to_bucket(i, h["counts"][i].is_number_unsigned() ? h["counts"][i].get<uint64_t>() : 0);
  }
  into.add_sum(h.value("sum", 0.0));
}

class Exposition {
 public:
  void family(const char* name, const char* type, const char* help) {
    out_ += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  void sample(const std::string& name, const std::string& labels, double v) {
    out_ += name;
    if (!labels.empty()) out_ += "{" + labels + "}";
    out_ += " " + number(v) + "\n";
  }
  // A histogram's _bucket (cumulative, with "le"), _sum and _count samples.
  void histogram(const std::string& name, const std::string& labels, const LatencyHistogram& h) {
    const std::string sep = labels.empty() ? "" : labels + ",";
    uint64_t cumulative = 0;
    for (size_t i = 0; i < LatencyHistogram::kBuckets; ++i) {
      cumulative += h.bucket(i);
      const std::string le =
          i < LatencyHistogram::kBounds.size() ? number(LatencyHistogram::kBounds[i]) : "+Inf";
      sample(name + "_bucket", sep + "le=\"" + le + "\"", static_cast<double>(cumulative));
    }
    sample(name + "_sum", labels, h.sum());
    sample(name + "_count", labels, static_cast<double>(h.count()));
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

}  // namespace

JobMonitor::JobMonitor(JobInfo info) : info_(std::move(info)) {
  if (info_.world_size < 1) info_.world_size = 1;
  if (info_.started == 0) info_.started = wall_seconds();
  workers_.resize(static_cast<size_t>(info_.world_size));
  members_ = info_.world_size;
}

void JobMonitor::changed() {
  ++version_;
  cv_.notify_all();
}

void JobMonitor::add_metric(const json& record) {
  std::lock_guard lk(mu_);
  metrics_.push_back(record);
  if (state_ == "starting") state_ = "running";
  changed();
}

void JobMonitor::add_event(const json& event) {
  std::lock_guard lk(mu_);
  events_.push_back(event);
  if (event.value("event", "") == "membership_changed" && event.contains("members") &&
      event["members"].is_array()) {
    members_ = static_cast<int>(event["members"].size());
  }
  changed();
}

bool JobMonitor::update_worker(int rank, const std::optional<json>& joined,
                               const std::optional<json>& status,
                               const std::optional<std::string>& heartbeat) {
  std::lock_guard lk(mu_);
  if (rank < 0 || rank >= static_cast<int>(workers_.size())) return false;
  Worker& w = workers_[static_cast<size_t>(rank)];
  bool any = false;
  json j = joined.value_or(json());
  if (j != w.joined) {
    w.joined = std::move(j);
    any = true;
  }
  json s = status.value_or(json());
  if (s != w.status) {
    w.status = std::move(s);
    w.status_seen = wall_seconds();
    any = true;
  }
  std::string h = heartbeat.value_or("");
  if (h != w.heartbeat) {
    w.heartbeat = std::move(h);
    w.heartbeat_seen = wall_seconds();
    any = true;
  }
  if (any) changed();
  return any;
}

void JobMonitor::add_worker(int rank, int replaces) {
  std::lock_guard lk(mu_);
  if (rank < 0) return;
  if (rank >= static_cast<int>(workers_.size())) workers_.resize(static_cast<size_t>(rank) + 1);
  workers_[static_cast<size_t>(rank)].replaces = replaces;
  changed();
}

int JobMonitor::ranks() const {
  std::lock_guard lk(mu_);
  return static_cast<int>(workers_.size());
}

void JobMonitor::worker_exited(int rank, const std::string& how, bool ok) {
  std::lock_guard lk(mu_);
  if (rank < 0 || rank >= static_cast<int>(workers_.size())) return;
  workers_[static_cast<size_t>(rank)].exit = how;
  workers_[static_cast<size_t>(rank)].exit_ok = ok;
  changed();
}

void JobMonitor::finish(const std::string& state, const json& summary) {
  std::lock_guard lk(mu_);
  state_ = state;
  summary_ = summary;
  finished_ = wall_seconds();
  changed();
}

void JobMonitor::set_console_url(const std::string& url) {
  std::lock_guard lk(mu_);
  console_url_ = url;
  changed();
}

void JobMonitor::set_state(const std::string& state) {
  std::lock_guard lk(mu_);
  if (state_ == state) return;
  state_ = state;
  changed();
}

void JobMonitor::set_worker_rows(const json& rows) {
  std::lock_guard lk(mu_);
  if (rows == worker_rows_) return;
  worker_rows_ = rows;
  changed();
}

json JobMonitor::job_locked() const {
  const double now = finished_ > 0 ? finished_ : wall_seconds();
  json j{{"name", info_.name},
         {"state", state_},
         {"world_size", info_.world_size},
         {"members", members_},
         {"run_dir", info_.run_dir},
         {"config", info_.config_yaml},
         {"started", info_.started},
         {"elapsed_seconds", now - info_.started},
         {"console_url", console_url_}};
  int joined = 0;
  for (const auto& w : workers_) joined += w.joined.is_null() ? 0 : 1;
  j["joined"] = joined;
  if (!metrics_.empty()) {
    const json& m = metrics_.back();
    const int64_t step = m.value("step", int64_t{0}), total = m.value("total_steps", int64_t{0});
    const double steps_per_sec = m.value("steps_per_sec", 0.0);
    j["step"] = step;
    j["total_steps"] = total;
    j["epoch"] = m.value("epoch", int64_t{0});
    j["epochs"] = m.value("epochs", int64_t{1});
    j["loss"] = json_number(m, "loss", 0.0);
    if (m.contains("accuracy")) j["accuracy"] = m["accuracy"];
    j["samples_per_sec"] = m.value("samples_per_sec", 0.0);
    j["progress"] = total > 0 ? static_cast<double>(step) / static_cast<double>(total) : 0.0;
    if (is_finished(state_)) {
      j["eta_seconds"] = 0.0;
    } else if (steps_per_sec > 0) {
      j["eta_seconds"] = static_cast<double>(total - step) / steps_per_sec;
    } else {
      j["eta_seconds"] = nullptr;
    }
  } else {
    j["step"] = 0;
    j["progress"] = 0.0;
    j["eta_seconds"] = nullptr;
  }
  if (!summary_.is_null()) j["summary"] = summary_;
  return j;
}

json JobMonitor::worker_locked(int rank) const {
  const Worker& w = workers_[static_cast<size_t>(rank)];
  const double now = wall_seconds();
  std::string state = "waiting";
  if (w.status.is_object()) {
    state = w.status.value("state", std::string("training"));
  } else if (!w.joined.is_null()) {
    state = "joined";
  }
  if (!w.exit.empty() && state != "finished") state = w.exit_ok ? "exited" : "failed";
  json r{{"rank", rank}, {"state", state}};
  const json& src = w.status.is_object() ? w.status : w.joined;
  r["host"] = src.is_object() ? src.value("host", std::string()) : std::string();
  r["pid"] = src.is_object() ? src.value("pid", 0L) : 0L;
  if (w.status.is_object()) {
    for (const char* k : {"step", "total_steps", "epoch", "step_time", "comm_share", "bytes_sent",
                          "samples_per_sec", "time", "staleness"}) {
      if (w.status.contains(k)) r[k] = w.status[k];
    }
    r["status_age_seconds"] = now - w.status.value("time", w.status_seen);
  }
  // The heartbeat is a counter its worker bumps (fault tolerance): when it last moved is what
  // tells whether the worker is alive.
  if (!w.heartbeat.empty()) {
    r["last_heartbeat"] = w.heartbeat_seen;
    r["heartbeat_age_seconds"] = now - w.heartbeat_seen;
    char* end = nullptr;
    long long beats = std::strtoll(w.heartbeat.c_str(), &end, 10);
    if (end && *end == '\0') r["heartbeats"] = beats;
  } else {
    r["last_heartbeat"] = nullptr;
  }
  if (!w.exit.empty()) r["exit"] = w.exit;
  if (w.replaces >= 0) r["replaces"] = w.replaces;
  return r;
}

json JobMonitor::job() const {
  std::lock_guard lk(mu_);
  return job_locked();
}

json JobMonitor::workers() const {
  std::lock_guard lk(mu_);
  if (worker_rows_.is_array()) return worker_rows_;
  json out = json::array();
  for (int r = 0; r < static_cast<int>(workers_.size()); ++r) out.push_back(worker_locked(r));
  return out;
}

void JobMonitor::set_servers(const json& rows) {
  std::lock_guard lk(mu_);
  // Heartbeat ages move every call: a row changes the console when anything else in it does.
  auto without_age = [](json r) {
    for (auto& row : r) row.erase("heartbeat_age_seconds");
    return r;
  };
  const bool moved = without_age(rows) != without_age(servers_);
  servers_ = rows;
  if (moved) changed();
}

json JobMonitor::servers() const {
  std::lock_guard lk(mu_);
  return servers_;
}

json JobMonitor::metrics_since(int64_t step) const {
  std::lock_guard lk(mu_);
  json out = json::array();
  for (const auto& m : metrics_) {
    if (m.value("step", int64_t{0}) > step) out.push_back(m);
  }
  return out;
}

json JobMonitor::events() const {
  std::lock_guard lk(mu_);
  return json(events_);
}

json JobMonitor::delta(Cursor& c) const {
  std::lock_guard lk(mu_);
  json d{{"job", job_locked()}};
  json ws = json::array();
  for (int r = 0; r < static_cast<int>(workers_.size()); ++r) ws.push_back(worker_locked(r));
  d["workers"] = worker_rows_.is_array() ? worker_rows_ : std::move(ws);
  d["servers"] = servers_;
  json ms = json::array(), es = json::array();
  for (size_t i = c.metrics; i < metrics_.size(); ++i) ms.push_back(metrics_[i]);
  for (size_t i = c.events; i < events_.size(); ++i) es.push_back(events_[i]);
  d["metrics"] = std::move(ms);
  d["events"] = std::move(es);
  c.metrics = metrics_.size();
  c.events = events_.size();
  c.version = version_;
  return d;
}

uint64_t JobMonitor::version() const {
  std::lock_guard lk(mu_);
  return version_;
}

uint64_t JobMonitor::wait_for_change(uint64_t seen, std::chrono::milliseconds timeout) const {
  std::unique_lock lk(mu_);
  cv_.wait_for(lk, timeout, [&] { return version_ != seen; });
  return version_;
}

std::string JobMonitor::prometheus() const {
  std::lock_guard lk(mu_);
  Exposition e;
  e.family("cohort_job_info", "gauge", "The job: its name and state (value 1).");
  e.sample("cohort_job_info", "name=\"" + label(info_.name) + "\",state=\"" + state_ + "\"", 1);
  e.family("cohort_workers", "gauge", "Workers the job runs with.");
  e.sample("cohort_workers", "", info_.world_size);
  const json last = metrics_.empty() ? json::object() : metrics_.back();
  e.family("cohort_step", "gauge", "Training steps completed (rank 0).");
  e.sample("cohort_step", "", last.value("step", 0.0));
  e.family("cohort_total_steps", "gauge", "Training steps the job will run.");
  e.sample("cohort_total_steps", "", last.value("total_steps", 0.0));
  e.family("cohort_loss", "gauge", "Mean training loss over the last logged window.");
  e.sample("cohort_loss", "", json_number(last, "loss", NAN));
  e.family("cohort_train_accuracy", "gauge",
           "Training accuracy of rank 0's batches over the last logged window.");
  e.sample("cohort_train_accuracy", "", last.value("accuracy", NAN));
  e.family("cohort_samples_per_second", "gauge", "Training throughput of all workers together.");
  e.sample("cohort_samples_per_second", "", last.value("samples_per_sec", 0.0));

  double bytes_total = 0;
  LatencyHistogram wait;
  std::map<std::string, LatencyHistogram> latency;  // by operation, all workers together
  for (const auto& w : workers_) {
    if (!w.status.is_object()) continue;
    bytes_total += w.status.value("bytes_sent", 0.0);
    if (w.status.contains("comm_wait_hist")) add_histogram(wait, w.status["comm_wait_hist"]);
    const json& ops =
        w.status.contains("collective_latency") ? w.status["collective_latency"] : json::object();
    if (!ops.is_object()) continue;
    for (const auto& [op, h] : ops.items()) add_histogram(latency[op], h);
  }
  e.family("cohort_bytes_sent_total", "counter", "Bytes all workers sent to their peers.");
  e.sample("cohort_bytes_sent_total", "", bytes_total);
  e.family("cohort_collective_latency_seconds", "histogram",
           "Time each collective took from start to finish, by operation, all workers.");
  for (const auto& [op, h] : latency) {
    e.histogram("cohort_collective_latency_seconds", "op=\"" + label(op) + "\"", h);
  }
  e.family("cohort_collective_wait_seconds", "histogram",
           "Time a training step blocked on its gradient allreduces, all workers' steps.");
  e.histogram("cohort_collective_wait_seconds", "", wait);

  std::vector<json> rows;
  for (int r = 0; r < static_cast<int>(workers_.size()); ++r) rows.push_back(worker_locked(r));
  e.family("cohort_worker_state", "gauge", "Each worker's state (1 for its current state).");
  for (const auto& w : rows) {
    for (const char* s : kWorkerStates) {
      e.sample("cohort_worker_state",
               "rank=\"" + std::to_string(w["rank"].get<int>()) + "\",state=\"" + s + "\"",
               w["state"] == s ? 1 : 0);
    }
  }
  struct Gauge {
    const char* name;
    const char* field;
    const char* type;
    const char* help;
  };
  const Gauge gauges[] = {
      {"cohort_worker_step", "step", "gauge", "Steps the worker has completed."},
      {"cohort_worker_step_seconds", "step_time", "gauge",
       "The worker's mean step time over its last status window."},
      {"cohort_worker_comm_share", "comm_share", "gauge",
       "Share of the worker's step time spent waiting on gradient exchange (0..1)."},
      {"cohort_worker_bytes_sent_total", "bytes_sent", "counter", "Bytes the worker sent."},
      {"cohort_worker_heartbeat_age_seconds", "heartbeat_age_seconds", "gauge",
       "Seconds since the worker's last heartbeat."},
  };
  for (const auto& g : gauges) {
    bool any = false;
    for (const auto& w : rows) any = any || (w.contains(g.field) && w[g.field].is_number());
    if (!any) continue;
    e.family(g.name, g.type, g.help);
    for (const auto& w : rows) {
      if (!w.contains(g.field) || !w[g.field].is_number()) continue;
      e.sample(g.name, "rank=\"" + std::to_string(w["rank"].get<int>()) + "\"",
               w[g.field].get<double>());
    }
  }
  return e.take();
}

}  // namespace cohort::monitor
