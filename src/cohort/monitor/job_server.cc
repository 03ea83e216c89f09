#include "cohort/monitor/job_server.h"

#include <httplib.h>
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cohort/base/clock.h"
#include "cohort/base/error.h"
#include "cohort/base/file.h"
#include "cohort/base/log.h"
#include "cohort/base/secret.h"
#include "cohort/elastic/process.h"
#include "cohort/monitor/web_assets.h"

namespace fs = std::filesystem;

namespace cohort::monitor {

using nlohmann::json;

namespace {

bool is_final(const std::string& state) {
  return state == "completed" || state == "failed" || state == "cancelled";
}

void reply(httplib::Response& res, const json& body, int status = 200) {
  send_json(res, body, status);
}

void reply_asset(httplib::Response& res, std::string_view name) {
  const WebAsset* a = find_web_asset(name);
  if (!a) return reply(res, {{"error", "no such file: " + std::string(name)}}, 404);
  res.set_content(std::string(a->body), content_type_for(name).c_str());
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Complete lines appended to `path` since `offset` (a partial last line waits for its newline).
std::vector<std::string> new_lines(const fs::path& path, size_t& offset) {
  std::vector<std::string> out;
  std::ifstream in(path, std::ios::binary);
  if (!in) return out;
  in.seekg(static_cast<std::streamoff>(offset));
  std::string chunk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t start = 0;
  for (size_t nl; (nl = chunk.find('\n', start)) != std::string::npos; start = nl + 1) {
    if (nl > start) out.push_back(chunk.substr(start, nl - start));
  }
  offset += start;
  return out;
}

}  // namespace

struct JobServer::Running {
  JobRecord rec;
  elastic::ChildProcess proc;
  std::shared_ptr<JobMonitor> monitor;
  fs::path run_dir;
  size_t metrics_offset = 0, events_offset = 0;
  Clock::time_point next_workers_poll = Clock::now();
  std::unique_ptr<httplib::Client> console;
};

JobServer::JobServer(JobServerOptions options) : options_(std::move(options)) {
  if (options_.max_workers <= 0) {
    options_.max_workers = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  }
  if (options_.token.size() < 16) {
    throw ConfigError("cohort serve: the server's token needs 16 characters or more");
  }
  server_ = std::make_unique<ConsoleServer>(
      ConsoleServerOptions{.bind_host = options_.bind_host, .port = options_.port});
}

JobServer::~JobServer() {
  stop();
}

void JobServer::start() {
  fs::create_directories(fs::path(options_.home) / "jobs");
  history_ = std::make_unique<JobHistory>((fs::path(options_.home) / "history.db").string());
  // A job the previous server was running lost its launcher with it (the launcher dies with its
  // parent). Its summary.json, if written, tells how it ended.
  for (JobRecord j : history_->with_state("running")) {
    fs::path summary = fs::path(j.run_dir) / "summary.json";
    json s = fs::exists(summary) ? json::parse(slurp(summary), nullptr, false) : json();
    if (s.is_object() && s.contains("status")) {
      j.state = s.value("status", std::string("failed"));
      j.summary = s;
      j.error = s.value("error", std::string());
    } else {
      j.state = "failed";
      j.error = "the server stopped while the job was running";
    }
    j.finished = wall_seconds();
    history_->update(j);
    spdlog::warn("serve: job {} ({}) was running when the server stopped: {}", j.id, j.name,
                 j.state);
  }
  add_routes();
  server_->start();
  scheduler_ = std::thread([this] { schedule_loop(); });
}

void JobServer::stop() {
  if (stop_.exchange(true)) return;
  wake_.notify_all();
  if (scheduler_.joinable()) scheduler_.join();
  server_->stop();
}

std::shared_ptr<const JobMonitor> JobServer::monitor_for(int64_t id) {
  {
    std::lock_guard lk(mu_);
    auto it = monitors_.find(id);
    if (it != monitors_.end()) {
      used_[id] = ++uses_;
      return it->second;
    }
  }
  auto rec = history_->get(id);
  if (!rec) return nullptr;
  auto m = std::make_shared<JobMonitor>(
      JobInfo{.name = rec->name,
              .world_size = rec->workers,
              .config_yaml = rec->config_yaml,
              .run_dir = rec->run_dir,
              .started = rec->started > 0 ? rec->started : rec->submitted});
  for (const auto& r : history_->metrics(id)) m->add_metric(r);
  for (const auto& e : history_->events(id)) m->add_event(e);
  if (is_final(rec->state)) {
    json summary = rec->summary.is_null() ? json{{"status", rec->state}} : rec->summary;
    if (!rec->error.empty() && !summary.contains("error")) summary["error"] = rec->error;
    m->finish(rec->state, summary);
    // The workers as they ended, from the summary's per-rank reports.
    if (summary.contains("per_rank") && summary["per_rank"].is_array()) {
      json rows = json::array();
      for (const auto& p : summary["per_rank"]) {
        const double comm = p.value("comm_seconds", 0.0), compute = p.value("compute_seconds", 0.0);
        const double steps = p.value("steps", 0.0), train = p.value("train_seconds", 0.0);
        rows.push_back({{"rank", p.value("rank", 0)},
                        {"host", p.value("host", std::string())},
                        {"pid", p.value("pid", 0)},
                        {"state", "finished"},
                        {"step", p.value("steps", 0)},
                        {"step_time", steps > 0 ? train / steps : 0.0},
                        {"comm_share", comm + compute > 0 ? comm / (comm + compute) : 0.0},
                        {"bytes_sent", p.value("comm_bytes", 0.0)},
                        {"last_heartbeat", nullptr}});
      }
      m->set_worker_rows(rows);
    }
  } else {
    m->set_state(rec->state);
  }
  std::lock_guard lk(mu_);
  // Keep finished and queued jobs' pictures (the most recent); a running job's is the scheduler's.
  auto kept = monitors_.emplace(id, m).first->second;
  used_[id] = ++uses_;
  keep_recent();
  return kept;
}

void JobServer::keep_recent() {
  std::vector<std::pair<uint64_t, int64_t>> idle;  // (last use, id) of jobs not running
  for (const auto& [id, m] : monitors_) {
    if (!running_.count(id)) idle.emplace_back(used_[id], id);
  }
  if (idle.size() <= kKeptMonitors) return;
  std::sort(idle.begin(), idle.end());
  for (size_t i = 0; i + kKeptMonitors < idle.size(); ++i) {
    monitors_.erase(idle[i].second);
    used_.erase(idle[i].second);
  }
}

void JobServer::guard_routes() {
  const bool loopback = is_loopback_host(options_.bind_host);
  const HttpAccessPolicy policy{
      .token = options_.token, .open_reads = loopback || options_.open_reads, .loopback = loopback};
  auto& s = server_->http();
  s.set_pre_routing_handler([policy](const httplib::Request& req, httplib::Response& res) {
    if (req.path == "/login" && req.method == "GET")
      return httplib::Server::HandlerResponse::Unhandled;
    auto refusal = check_access(req, policy);
    if (!refusal) return httplib::Server::HandlerResponse::Unhandled;
    spdlog::warn("serve: refused {} {} from {}: {}", req.method, req.path, req.remote_addr,
                 refusal->reason);
    if (refusal->status == 401) res.set_header("WWW-Authenticate", "Bearer");
    reply(res, {{"error", refusal->reason}}, refusal->status);
    return httplib::Server::HandlerResponse::Handled;
  });
  s.Get("/login", [policy](const httplib::Request& req, httplib::Response& res) {
    const std::string given = req.get_param_value("token");
    if (given.empty() || !secrets_equal(given, policy.token)) {
      return reply(res, {{"error", "wrong or missing token"}}, 401);
    }
    res.set_header("Set-Cookie",
                   std::string(kTokenCookie) + "=" + given + "; Path=/; HttpOnly; SameSite=Strict");
    res.set_redirect("/");
  });
}

void JobServer::add_routes() {
  guard_routes();
  auto& s = server_->http();
  s.Get("/",
        [](const httplib::Request&, httplib::Response& res) { reply_asset(res, "jobs.html"); });
  s.Get("/compare",
        [](const httplib::Request&, httplib::Response& res) { reply_asset(res, "compare.html"); });
  s.Get(R"(/assets/([A-Za-z0-9_.-]+))", [](const httplib::Request& req, httplib::Response& res) {
    reply_asset(res, req.matches[1].str());
  });
  server_->add_jobs(R"(/jobs/(\d+))",
                    [this](const std::string& key) { return monitor_for(std::stoll(key)); });

  s.Get("/api/jobs", [this](const httplib::Request&, httplib::Response& res) {
    json out = json::array();
    for (const auto& j : history_->list()) out.push_back(j.to_json());
    reply(res, out);
  });
  s.Post("/api/jobs", [this](const httplib::Request& req, httplib::Response& res) {
    json body = json::parse(req.body, nullptr, false);
    if (!body.is_object() || !body.contains("yaml") || !body["yaml"].is_string()) {
      return reply(res, {{"error", "expected a JSON object with \"yaml\" (the job file's text)"}},
                   400);
    }
    const std::string source = body.value("source", std::string("<submitted>"));
    std::vector<std::string> overrides;
    if (body.contains("overrides") && body["overrides"].is_array()) {
      for (const auto& o : body["overrides"]) overrides.push_back(o.get<std::string>());
    }
    ValidatedJob v;
    try {
      v = options_.validate(body["yaml"].get<std::string>(), source, overrides);
    } catch (const ConfigError& e) {
      return reply(res, {{"error", e.what()}}, 400);
    }
    if (v.workers > options_.max_workers) {
      return reply(res,
                   {{"error", source + ": workers: the job needs " + std::to_string(v.workers) +
                                  " workers; this server runs at most " +
                                  std::to_string(options_.max_workers) +
                                  " at once (cohort serve --max-workers)"}},
                   400);
    }
    JobRecord rec{.name = v.name,
                  .state = "queued",
                  .workers = v.workers,
                  .source = source,
                  .config_yaml = v.resolved_yaml,
                  .submitted = wall_seconds()};
    rec.id = history_->add(rec);
    history_->add_event(rec.id,
                        {{"time", rec.submitted}, {"event", "job_submitted"}, {"source", source}});
    wake_.notify_all();
    json out = rec.to_json();
    out["url"] = "/jobs/" + std::to_string(rec.id) + "/";
    reply(res, out, 201);
  });
  s.Get(R"(/api/jobs/(\d+))", [this](const httplib::Request& req, httplib::Response& res) {
    auto rec = history_->get(std::stoll(req.matches[1].str()));
    if (!rec) return reply(res, {{"error", "no such job: " + req.matches[1].str()}}, 404);
    json out = rec->to_json();
    out["config"] = rec->config_yaml;
    reply(res, out);
  });
  s.Post(R"(/api/jobs/(\d+)/cancel)", [this](const httplib::Request& req, httplib::Response& res) {
    const int64_t id = std::stoll(req.matches[1].str());
    std::lock_guard lk(mu_);  // no queued job starts while we look at it
    auto rec = history_->get(id);
    if (!rec) return reply(res, {{"error", "no such job: " + req.matches[1].str()}}, 404);
    if (rec->state == "queued") {
      rec->state = "cancelled";
      rec->finished = wall_seconds();
      rec->error = "cancelled before it started";
      history_->update(*rec);
      history_->add_event(id, {{"time", rec->finished}, {"event", "job_cancelled"}});
      monitors_.erase(id);
      return reply(res, {{"id", id}, {"state", "cancelled"}});
    }
    if (rec->state == "running") {
      cancels_.push_back(id);
      wake_.notify_all();
      return reply(res, {{"id", id}, {"state", "cancelling"}}, 202);
    }
    reply(res, {{"error", "job " + std::to_string(id) + " has already ended (" + rec->state + ")"}},
          409);
  });
  s.Get(R"(/api/jobs/(\d+)/logs)", [this](const httplib::Request& req, httplib::Response& res) {
    auto rec = history_->get(std::stoll(req.matches[1].str()));
    if (!rec) return reply(res, {{"error", "no such job: " + req.matches[1].str()}}, 404);
    if (rec->state == "queued") return res.set_content("(queued: no logs yet)\n", "text/plain");
    fs::path dir = fs::path(options_.home) / "jobs" / std::to_string(rec->id);
    std::string text = "==> launcher <==\n" + slurp(dir / "launcher.log");
    std::vector<fs::path> ranks;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir / "run" / "logs", ec))
      ranks.push_back(e.path());
    std::sort(ranks.begin(), ranks.end());
    for (const auto& p : ranks) text += "\n==> " + p.filename().string() + " <==\n" + slurp(p);
    res.set_content(text, "text/plain; charset=utf-8");
  });
}

void JobServer::start_job(const JobRecord& queued) {
  JobRecord rec = queued;
  fs::path dir = fs::path(options_.home) / "jobs" / std::to_string(rec.id);
  fs::create_directories(dir);
  write_file_atomically(dir / "job.yaml", rec.config_yaml);
  auto r = std::make_unique<Running>();
  r->run_dir = dir / "run";
  // Every job gets a console of its own on a free port (two jobs cannot share the file's port);
  // the server copies its worker rows.
  r->proc = elastic::ChildProcess::spawn({
      .executable = options_.cohort_binary,
      .args = {"run", (dir / "job.yaml").string(), "--run-dir", r->run_dir.string(), "--set",
               "dashboard={port: 0}"},
      .stdout_path = (dir / "launcher.log").string(),
      .stderr_path = (dir / "launcher.log").string(),
  });
  rec.state = "running";
  rec.started = wall_seconds();
  rec.run_dir = r->run_dir.string();
  rec.launcher_pid = r->proc.pid();
  history_->update(rec);
  r->rec = rec;
  auto& m = monitors_[rec.id];
  if (!m) {
    m = std::make_shared<JobMonitor>(JobInfo{.name = rec.name,
                                             .world_size = rec.workers,
                                             .config_yaml = rec.config_yaml,
                                             .run_dir = rec.run_dir,
                                             .started = rec.started});
    for (const auto& e : history_->events(rec.id)) m->add_event(e);
  }
  m->set_state("starting");
  r->monitor = m;
  spdlog::info("serve: job {} ({}) started: {} workers, pid {}", rec.id, rec.name, rec.workers,
               rec.launcher_pid);
  running_.emplace(rec.id, std::move(r));
}

void JobServer::follow(Running& r) {
  for (const auto& line : new_lines(r.run_dir / "metrics.jsonl", r.metrics_offset)) {
    json m = json::parse(line, nullptr, false);
    if (m.is_discarded()) continue;
    history_->add_metric(r.rec.id, m);
    r.monitor->add_metric(m);
  }
  for (const auto& line : new_lines(r.run_dir / "events.jsonl", r.events_offset)) {
    json e = json::parse(line, nullptr, false);
    if (e.is_discarded()) continue;
    history_->add_event(r.rec.id, e);
    r.monitor->add_event(e);
    if (e.value("event", "") == "console_started") {
      r.rec.console_url = e.value("url", std::string());
      history_->update(r.rec);
      r.monitor->set_console_url(r.rec.console_url);
      std::string origin = r.rec.console_url;
      if (!origin.empty() && origin.back() == '/') origin.pop_back();
      r.console = std::make_unique<httplib::Client>(origin);
      r.console->set_connection_timeout(1, 0);
      r.console->set_read_timeout(2, 0);
    }
  }
}

void JobServer::poll_workers(Running& r) {
  if (!r.console || Clock::now() < r.next_workers_poll) return;
  r.next_workers_poll = Clock::now() + std::chrono::milliseconds(500);
  if (auto res = r.console->Get("/api/workers"); res && res->status == 200) {
    json rows = json::parse(res->body, nullptr, false);
    if (rows.is_array()) r.monitor->set_worker_rows(rows);
  }
}

bool JobServer::finish_if_exited(Running& r) {
  auto st = r.proc.poll();
  if (!st) return false;
  follow(r);
  JobRecord& rec = r.rec;
  fs::path summary = r.run_dir / "summary.json";
  json s = fs::exists(summary) ? json::parse(slurp(summary), nullptr, false) : json();
  if (s.is_object() && s.contains("status")) {
    rec.state = s.value("status", std::string("failed"));
    rec.summary = s;
    rec.error = s.value("error", std::string());
  } else {
    // Refused before it started (e.g. its data directory vanished) or killed: the log says why.
    std::string log =
        slurp(fs::path(options_.home) / "jobs" / std::to_string(rec.id) / "launcher.log");
    while (!log.empty() && log.back() == '\n') log.pop_back();
    auto nl = log.rfind('\n');
    rec.state = "failed";
    rec.error = "cohort run " + st->describe() +
                (log.empty() ? "" : ": " + (nl == std::string::npos ? log : log.substr(nl + 1)));
    rec.summary = json{{"status", "failed"}, {"error", rec.error}};
  }
  rec.finished = wall_seconds();
  history_->update(rec);
  r.monitor->finish(rec.state, rec.summary);
  spdlog::info("serve: job {} ({}) {}", rec.id, rec.name, rec.state);
  return true;
}

void JobServer::locked_pass() {
  for (int64_t id : cancels_) {
    if (auto it = running_.find(id); it != running_.end()) it->second->proc.signal(SIGINT);
  }
  cancels_.clear();
  int used = 0;
  for (auto it = running_.begin(); it != running_.end();) {
    follow(*it->second);
    if (finish_if_exited(*it->second)) {
      used_[it->first] = ++uses_;  // its picture counts as just seen, among those kept
      it = running_.erase(it);
      keep_recent();
    } else {
      used += it->second->rec.workers;
      ++it;
    }
  }
  if (stop_.load()) return;
  // In submission order: a job that does not fit yet holds back the ones after it.
  for (const auto& q : history_->with_state("queued")) {
    if (used + q.workers > options_.max_workers) break;
    try {
      start_job(q);
      used += q.workers;
    } catch (const std::exception& e) {
      JobRecord failed = q;
      failed.state = "failed";
      failed.error = std::string("could not start: ") + e.what();
      failed.finished = wall_seconds();
      history_->update(failed);
      monitors_.erase(q.id);
    }
  }
}

void JobServer::schedule_loop() {
  // Under the lock: cancels, files, exits, starts. The worker rows come over HTTP from each job's
  // own console, outside the lock, so that a slow console never stalls this server's API. Only
  // this thread adds to or removes from running_, so the pointers stay valid.
  auto pass = [this] {
    std::vector<Running*> consoles;
    {
      std::lock_guard lk(mu_);
      locked_pass();
      for (auto& [id, r] : running_) consoles.push_back(r.get());
    }
    for (Running* r : consoles) poll_workers(*r);
  };
  while (!stop_.load()) {
    try {
      pass();
    } catch (const std::exception& e) {
      spdlog::error("serve: {}", e.what());
    }
    std::unique_lock lk(mu_);
    wake_.wait_for(lk, std::chrono::milliseconds(200), [this] { return stop_.load(); });
  }
  // Stopping: every running job ends as Ctrl-C would end it, and is recorded.
  std::lock_guard lk(mu_);
  for (auto& [id, r] : running_) r->proc.signal(SIGINT);
  auto deadline = Deadline::after(std::chrono::seconds(30));
  for (auto& [id, r] : running_) {
    r->proc.wait_for(deadline.remaining());
    if (r->proc.running()) r->proc.terminate(std::chrono::seconds(2));
    try {
      finish_if_exited(*r);
    } catch (const std::exception& e) {
      spdlog::error("serve: job {}: {}", id, e.what());
    }
  }
  running_.clear();
}

}  // namespace cohort::monitor
