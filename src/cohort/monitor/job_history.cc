#include "cohort/monitor/job_history.h"

#include <sqlite3.h>

#include "cohort/base/error.h"

namespace cohort::monitor {

using nlohmann::json;

namespace {

// A prepared statement, finalized on scope exit.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) : db_(db) {
    if (sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr) != SQLITE_OK) {
      throw Error(std::string("job history: ") + sqlite3_errmsg(db) + " in: " + sql);
    }
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Statement& bind(int i, int64_t v) {
    check(sqlite3_bind_int64(stmt_, i, v));
    return *this;
  }
  Statement& bind(int i, double v) {
    check(sqlite3_bind_double(stmt_, i, v));
    return *this;
  }
  Statement& bind(int i, const std::string& v) {
    check(sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
    return *this;
  }
  // Steps once: true while a row is available.
  bool step() {
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    throw Error(std::string("job history: ") + sqlite3_errmsg(db_));
  }
  int64_t int64(int col) { return sqlite3_column_int64(stmt_, col); }
  double real(int col) { return sqlite3_column_double(stmt_, col); }
  std::string text(int col) {
    auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
    return p ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(stmt_, col))) : "";
  }

 private:
  void check(int rc) {
    if (rc != SQLITE_OK) throw Error(std::string("job history: ") + sqlite3_errmsg(db_));
  }
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
};

constexpr const char* kColumns =
    "id, name, state, workers, source, config_yaml, run_dir, submitted, started, finished, error, "
    "summary, launcher_pid, console_url";

JobRecord read_row(Statement& s) {
  JobRecord j;
  j.id = s.int64(0);
  j.name = s.text(1);
  j.state = s.text(2);
  j.workers = static_cast<int>(s.int64(3));
  j.source = s.text(4);
  j.config_yaml = s.text(5);
  j.run_dir = s.text(6);
  j.submitted = s.real(7);
  j.started = s.real(8);
  j.finished = s.real(9);
  j.error = s.text(10);
  std::string summary = s.text(11);
  j.summary = summary.empty() ? json() : json::parse(summary, nullptr, false);
  if (j.summary.is_discarded()) j.summary = json();
  j.launcher_pid = s.int64(12);
  j.console_url = s.text(13);
  return j;
}

}  // namespace

json JobRecord::to_json() const {
  json j{{"id", id},
         {"name", name},
         {"state", state},
         {"workers", workers},
         {"source", source},
         {"run_dir", run_dir},
         {"submitted", submitted},
         {"started", started > 0 ? json(started) : json()},
         {"finished", finished > 0 ? json(finished) : json()},
         {"error", error},
         {"console_url", console_url}};
  if (!summary.is_null()) j["summary"] = summary;
  return j;
}

JobHistory::JobHistory(const std::string& path) : path_(path) {
  if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
      SQLITE_OK) {
    std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    throw Error("job history " + path + ": " + msg);
  }
  sqlite3_busy_timeout(db_, 10000);
  exec("PRAGMA journal_mode = WAL");
  exec("PRAGMA synchronous = NORMAL");
  exec(
      "CREATE TABLE IF NOT EXISTS jobs ("
      "  id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, state TEXT NOT NULL,"
      "  workers INTEGER NOT NULL, source TEXT NOT NULL, config_yaml TEXT NOT NULL,"
      "  run_dir TEXT NOT NULL, submitted REAL NOT NULL, started REAL NOT NULL DEFAULT 0,"
      "  finished REAL NOT NULL DEFAULT 0, error TEXT NOT NULL DEFAULT '',"
      "  summary TEXT NOT NULL DEFAULT '', launcher_pid INTEGER NOT NULL DEFAULT 0,"
      "  console_url TEXT NOT NULL DEFAULT '');"
      "CREATE TABLE IF NOT EXISTS metrics (job INTEGER NOT NULL, step INTEGER NOT NULL,"
      "  record TEXT NOT NULL);"
      "CREATE INDEX IF NOT EXISTS metrics_by_job ON metrics (job, step);"
      "CREATE TABLE IF NOT EXISTS events (job INTEGER NOT NULL, seq INTEGER NOT NULL,"
      "  event TEXT NOT NULL, PRIMARY KEY (job, seq));");
}

JobHistory::~JobHistory() {
  sqlite3_close(db_);
}

void JobHistory::exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    throw Error("job history " + path_ + ": " + msg);
  }
}

int64_t JobHistory::add(const JobRecord& j) {
  std::lock_guard lk(mu_);
  Statement s(db_,
              "INSERT INTO jobs (name, state, workers, source, config_yaml, run_dir, submitted) "
              "VALUES (?, ?, ?, ?, ?, ?, ?)");
  s.bind(1, j.name).bind(2, j.state).bind(3, int64_t{j.workers}).bind(4, j.source);
  s.bind(5, j.config_yaml).bind(6, j.run_dir).bind(7, j.submitted);
  s.step();
  return sqlite3_last_insert_rowid(db_);
}

void JobHistory::update(const JobRecord& j) {
  std::lock_guard lk(mu_);
  Statement s(db_,
              "UPDATE jobs SET name = ?, state = ?, workers = ?, source = ?, config_yaml = ?, "
              "run_dir = ?, submitted = ?, started = ?, finished = ?, error = ?, summary = ?, "
              "launcher_pid = ?, console_url = ? WHERE id = ?");
  s.bind(1, j.name).bind(2, j.state).bind(3, int64_t{j.workers}).bind(4, j.source);
  s.bind(5, j.config_yaml).bind(6, j.run_dir).bind(7, j.submitted).bind(8, j.started);
  s.bind(9, j.finished).bind(10, j.error).bind(11, j.summary.is_null() ? "" : j.summary.dump());
  s.bind(12, j.launcher_pid).bind(13, j.console_url).bind(14, j.id);
  s.step();
}

std::optional<JobRecord> JobHistory::get(int64_t id) {
  std::lock_guard lk(mu_);
  Statement s(db_, (std::string("SELECT ") + kColumns + " FROM jobs WHERE id = ?").c_str());
  s.bind(1, id);
  if (!s.step()) return std::nullopt;
  return read_row(s);
}

std::vector<JobRecord> JobHistory::list() {
  std::lock_guard lk(mu_);
  Statement s(db_, (std::string("SELECT ") + kColumns + " FROM jobs ORDER BY id DESC").c_str());
  std::vector<JobRecord> out;
  while (s.step()) out.push_back(read_row(s));
  return out;
}

std::vector<JobRecord> JobHistory::with_state(const std::string& state) {
  std::lock_guard lk(mu_);
  Statement s(
      db_, (std::string("SELECT ") + kColumns + " FROM jobs WHERE state = ? ORDER BY id").c_str());
  s.bind(1, state);
  std::vector<JobRecord> out;
  while (s.step()) out.push_back(read_row(s));
  return out;
}

void JobHistory::add_metric(int64_t job, const json& record) {
  std::lock_guard lk(mu_);
  Statement s(db_, "INSERT INTO metrics (job, step, record) VALUES (?, ?, ?)");
  s.bind(1, job).bind(2, record.value("step", int64_t{0})).bind(3, record.dump());
  s.step();
}

void JobHistory::add_event(int64_t job, const json& event) {
  std::lock_guard lk(mu_);
  Statement s(db_,
              "INSERT INTO events (job, seq, event) VALUES "
              "(?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE job = ?), ?)");
  s.bind(1, job).bind(2, job).bind(3, event.dump());
  s.step();
}

json JobHistory::metrics(int64_t job, int64_t since_step) {
  std::lock_guard lk(mu_);
  Statement s(db_, "SELECT record FROM metrics WHERE job = ? AND step > ? ORDER BY step, rowid");
  s.bind(1, job).bind(2, since_step);
  json out = json::array();
  while (s.step()) out.push_back(json::parse(s.text(0), nullptr, false));
  return out;
}

json JobHistory::events(int64_t job) {
  std::lock_guard lk(mu_);
  Statement s(db_, "SELECT event FROM events WHERE job = ? ORDER BY seq");
  s.bind(1, job);
  json out = json::array();
  while (s.step()) out.push_back(json::parse(s.text(0), nullptr, false));
  return out;
}

}  // namespace cohort::monitor
