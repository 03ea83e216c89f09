// JobMonitor: what the console knows about one job, in memory, shared between the thread that
// feeds it (the launcher's loop and the status poller) and the HTTP server's threads.
//
// It holds the job's identity and state, rank 0's progress records (the curves), the event log,
// and one row per worker built from what the worker publishes through the store
// (job/joined/<rank>, job/status/<rank>, job/heartbeat/<rank>) and from what the launcher saw of
// its process. Every change bumps a version number; readers wait for the next version to stream
// live updates (server-sent events) without polling.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace cohort::monitor {

struct JobInfo {
  std::string name;
  int world_size = 1;
  std::string config_yaml;  // the resolved job file
  std::string run_dir;
  double started = 0;  // wall-clock seconds since the Unix epoch
};

// Job states: "starting" (no progress yet), "running", then "completed", "failed" or "cancelled".
// Worker states published by workers: "joined", "training", "evaluating", "finished", "failed";
// the launcher adds "exited" (the process ended before reporting an end state).
class JobMonitor {
 public:
  explicit JobMonitor(JobInfo info);

  // Rank 0's progress record (train::train's fields: step, total_steps, epoch, epochs, loss,
  // accuracy, lr, samples_per_sec, steps_per_sec, time).
  void add_metric(const nlohmann::json& record);
  // An events.jsonl line (at least "time" and "event").
  void add_event(const nlohmann::json& event);
  // What the store says about a worker: its job/joined, job/status and job/heartbeat values (each
  // std::nullopt while absent). Returns whether anything changed.
  bool update_worker(int rank, const std::optional<nlohmann::json>& joined,
                     const std::optional<nlohmann::json>& status,
                     const std::optional<std::string>& heartbeat);
  // The launcher started a worker beyond the first world_size ranks (a replacement for rank
  // `replaces`, or -1): it gets a row of its own, which the status poller then follows.
  void add_worker(int rank, int replaces = -1);
  // How many worker rows there are (ranks 0 .. ranks()-1).
  int ranks() const;
  // The launcher saw the worker's process end (e.g. "exit 0", "killed by SIGKILL").
  void worker_exited(int rank, const std::string& how, bool ok);
  // The job's parameter servers as the launcher sees them (one row each: server, incarnation,
  // address, pid, state, primary_of, backup_of, heartbeat_age_seconds); an empty array when the
  // job has none.
  void set_servers(const nlohmann::json& rows);
  // The job ended: state is "completed", "failed" or "cancelled"; summary is summary.json.
  void finish(const std::string& state, const nlohmann::json& summary);
  void set_console_url(const std::string& url);
  // For a job followed from outside (cohort serve): its state ("queued", ...) and worker rows as
  // another console's /api/workers gave them; rows replace what update_worker() built.
  void set_state(const std::string& state);
  void set_worker_rows(const nlohmann::json& rows);

  // Views served by the API (see docs/console.md for their fields).
  nlohmann::json job() const;
  nlohmann::json workers() const;
  nlohmann::json servers() const;
  nlohmann::json metrics_since(int64_t step) const;  // records with step > `step`
  nlohmann::json events() const;
  // The Prometheus text exposition format, version 0.0.4.
  std::string prometheus() const;

  // Live updates. A cursor remembers what a reader has seen; delta() returns the job and the
  // workers (always) and the metrics and events added since, and advances the cursor.
  struct Cursor {
    size_t metrics = 0;
    size_t events = 0;
    uint64_t version = 0;
  };
  nlohmann::json delta(Cursor& cursor) const;
  uint64_t version() const;
  // Waits until the version differs from `seen` or `timeout` passes; returns the version.
  uint64_t wait_for_change(uint64_t seen, std::chrono::milliseconds timeout) const;

 private:
  struct Worker {
    nlohmann::json joined;      // {host, pid} or null
    nlohmann::json status;      // the worker's last published status or null
    std::string heartbeat;      // raw value of job/heartbeat/<rank> (a counter), "" if none
    double heartbeat_seen = 0;  // wall time the console saw it change
    std::string exit;           // how the process ended, "" while running
    bool exit_ok = true;
    double status_seen = 0;  // wall time the status last changed
    int replaces = -1;       // the rank this worker replaced, or -1
  };

  void changed();  // caller holds mu_
  nlohmann::json job_locked() const;
  nlohmann::json worker_locked(int rank) const;

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  uint64_t version_ = 1;
  JobInfo info_;
  std::string state_ = "starting";
  std::string console_url_;
  nlohmann::json summary_;
  std::vector<nlohmann::json> metrics_;
  std::vector<nlohmann::json> events_;
  std::vector<Worker> workers_;
  nlohmann::json worker_rows_;  // set_worker_rows(), or null
  nlohmann::json servers_ = nlohmann::json::array();
  double finished_ = 0;
  int members_ = 0;  // workers in the current membership epoch (membership_changed events)
};

}  // namespace cohort::monitor
