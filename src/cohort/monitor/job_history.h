// JobHistory: the jobs `cohort serve` has been given, kept in SQLite so that the list, each job's
// curves and events, and its outcome survive a restart of the server.
//
// Tables: jobs (one row per submitted job), metrics (progress records) and events (events.jsonl
// lines), the latter two keyed by job id. One connection behind a mutex; every write is its own
// transaction, so concurrent submits each get their own id and none is lost. The database runs in
// WAL mode with a busy timeout, so a second process (a restarted server) can open it too.
#pragma once

#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

struct sqlite3;

namespace cohort::monitor {

struct JobRecord {
  int64_t id = 0;
  std::string name;
  std::string state;  // queued, running, completed, failed, cancelled
  int workers = 1;
  std::string source;       // where the job file came from (a path, as given to submit)
  std::string config_yaml;  // the resolved job file
  std::string run_dir;
  double submitted = 0, started = 0, finished = 0;  // wall-clock seconds; 0: not yet
  std::string error;
  nlohmann::json summary;  // summary.json once finished, else null
  int64_t launcher_pid = 0;
  std::string console_url;  // the running job's own console

  nlohmann::json to_json() const;
};

class JobHistory {
 public:
  // Opens (creating if needed) the database at `path`. Throws Error naming the path on failure.
  explicit JobHistory(const std::string& path);
  ~JobHistory();
  JobHistory(const JobHistory&) = delete;
  JobHistory& operator=(const JobHistory&) = delete;

  // A new queued job; returns its id.
  int64_t add(const JobRecord& job);
  void update(const JobRecord& job);  // every field but id, by id
  std::optional<JobRecord> get(int64_t id);
  std::vector<JobRecord> list();                                // newest first
  std::vector<JobRecord> with_state(const std::string& state);  // oldest first

  void add_metric(int64_t job, const nlohmann::json& record);
  void add_event(int64_t job, const nlohmann::json& event);
  nlohmann::json metrics(int64_t job, int64_t since_step = -1);
  nlohmann::json events(int64_t job);

 private:
  void exec(const char* sql);
  std::mutex mu_;
  sqlite3* db_ = nullptr;
  std::string path_;
};

}  // namespace cohort::monitor
