// JobServer: `cohort serve`, a long-lived console over the jobs of this machine.
//
// Jobs are submitted over HTTP (`cohort submit`), validated at once (a bad job file is refused with
// the same error `cohort run` gives, and nothing is queued), kept in SQLite (JobHistory), and run
// in submission order as `cohort run` child processes whenever enough worker slots are free. While
// a job runs the server follows its run directory (metrics.jsonl, events.jsonl, summary.json) into
// the history and into a live JobMonitor, and copies the worker rows from the job's own console.
//
// Home directory layout: history.db, and jobs/<id>/{job.yaml, launcher.log, run/} per job.
//
// HTTP (besides the console page of every job under /jobs/<id>/, see ConsoleServer):
//   GET  /                       the jobs page (list, and two finished jobs compared)
//   GET  /api/jobs               every job, newest first
//   POST /api/jobs               {"source", "yaml", "overrides": [...]} -> 201 {"id", ...} | 400
//   GET  /api/jobs/<id>          one job, with its resolved config
//   POST /api/jobs/<id>/cancel   cancels a queued job, stops a running one (as Ctrl-C would)
//   GET  /api/jobs/<id>/logs     the launcher's output and every rank's log, as text
//   GET  /login?token=T          sets the token cookie for a browser's reads, then goes to /
// Submitting and cancelling need the server's token; reads need it too unless the server listens
// on loopback only or is told reads are open (monitor/http_access.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cohort/monitor/console_server.h"
#include "cohort/monitor/http_access.h"
#include "cohort/monitor/job_history.h"
#include "cohort/monitor/job_monitor.h"

namespace cohort::monitor {

struct ValidatedJob {
  std::string name;
  int workers = 1;
  std::string resolved_yaml;
};

// Reads and validates a job file's text the way `cohort run` does; throws ConfigError.
using JobValidator = std::function<ValidatedJob(const std::string& yaml, const std::string& source,
                                                const std::vector<std::string>& overrides)>;

struct JobServerOptions {
  std::string home;
  std::string bind_host = "127.0.0.1";
  uint16_t port = 8090;
  int max_workers = 0;        // worker processes running at once, all jobs together; 0: CPUs
  std::string cohort_binary;  // what runs a job: `<cohort_binary> run ...`
  JobValidator validate;
  // The secret of every state-changing request (16 characters or more; required).
  std::string token;
  // Reads without the token also when bound beyond loopback (on loopback they are always open).
  bool open_reads = false;
};

class JobServer {
 public:
  explicit JobServer(JobServerOptions options);
  ~JobServer();  // stop()

  // Opens the history (jobs a previous server left running are marked failed), binds, and starts
  // scheduling. Throws Error if the history cannot be opened or the address bound.
  void start();
  // Stops running jobs (as Ctrl-C would: they end "cancelled"), then the server.
  void stop();
  std::string url() const { return server_->url(); }

 private:
  struct Running;

  void schedule_loop();
  void start_job(const JobRecord& job);
  void follow(Running& r);        // new lines of its metrics and events (under mu_)
  void poll_workers(Running& r);  // its console's worker rows (scheduler thread, without mu_)
  void locked_pass();             // one scheduling pass (under mu_)
  bool finish_if_exited(Running& r);
  std::shared_ptr<const JobMonitor> monitor_for(int64_t id);
  void add_routes();
  void guard_routes();  // the access policy, before any route

  JobServerOptions options_;
  std::unique_ptr<JobHistory> history_;
  std::unique_ptr<ConsoleServer> server_;
  std::thread scheduler_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;  // guards monitors_, running_ (changed only by the scheduler thread), cancels_
  std::condition_variable wake_;
  std::map<int64_t, std::shared_ptr<JobMonitor>> monitors_;
  // When each monitor was last asked for: those of jobs not running are kept for the most recent
  // kKeptMonitors only (each holds its job's whole history), the others read again when asked.
  std::map<int64_t, uint64_t> used_;
  uint64_t uses_ = 0;
  static constexpr size_t kKeptMonitors = 32;
  void keep_recent();  // (under mu_)
  std::map<int64_t, std::unique_ptr<Running>> running_;
  std::vector<int64_t> cancels_;  // running jobs to stop, handled by the scheduler
};

}  // namespace cohort::monitor
