// The end of a job (job_launch.h): every process stopped, summary.json written, the report
// printed; and, while it runs, what the supervising loop watches for: stragglers and hangs.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "cohort/base/error.h"
#include "cohort/base/file.h"
#include "cohort/base/log.h"
#include "cohort/cli/job_launch.h"
#include "cohort/comm/transport/shm_pair.h"
#include "cohort/elastic/job_protocol.h"
#include "cohort/store/store.h"

namespace cohort::cli::detail {

void JobLaunch::check_stragglers() {
  const auto& members = coordinator_->members();
  for (int r = 0; r < next_rank_; ++r) {
    if (std::find(members.begin(), members.end(), r) == members.end()) {
      stragglers_.forget(r);
      continue;
    }
    const std::string key = elastic::keys::status(r);
    if (!debug_store_->check({key})) continue;
    try {
      json st = json::parse(store::to_string(debug_store_->get(key)));
      if (!st.contains("busy")) continue;
      std::vector<double> busy;
      for (int64_t us : st["busy"].value("us", std::vector<int64_t>{})) busy.push_back(us / 1e6);
      stragglers_.observe(r, st["busy"].value("first_step", int64_t{0}), busy);
    } catch (const json::exception&) {
      // A record from a worker of another version: not ours to judge.
    }
  }
  for (const trace::Straggler& s : stragglers_.poll()) {
    json e = s.to_json();
    e["event"] = "straggler";
    e["margin"] = cfg_.debug.straggler_margin;
    events_->write(e);
    spdlog::warn("{}", s.describe());
    progress_.end_line();
    std::printf("cohort: %s\n", s.describe().c_str());
    std::fflush(stdout);
  }
}

bool JobLaunch::end(std::string status, std::string error) {
  // Slurm ending the job signals the workers' steps and this launcher at once: a worker's death
  // may be seen first. That is a cancelled job, not a failed one.
  if (status == "failed" && slurm_) {
    if (auto why = slurm_->ending(); !why.empty()) {
      status = "cancelled";
      error = "Slurm is ending job " + slurm_->job_id + " (" + why + "); " + error;
    }
  }
  status_ = std::move(status);
  error_ = std::move(error);
  return false;
}

void JobLaunch::watch_for_hangs() {
  // Faster than the workers publish (twice a second), so that no record is missed.
  if (cfg_.workers > 1 && Clock::now() >= next_straggler_check_) {
    next_straggler_check_ = Clock::now() + std::chrono::milliseconds(250);
    check_stragglers();
  }
  if (Clock::now() >= next_hang_check_) {
    next_hang_check_ = Clock::now() + std::chrono::seconds(1);
    if (hang_watch_->stalled()) {
      progress_.end_line();
      report_hang(*hang_watch_, workers_, run_dir_, *events_,
                  "no rank made progress for " +
                      std::to_string(static_cast<long>(cfg_.debug.hang_timeout_s)) + " s");
    }
  }
}

json JobLaunch::summarize(double wall, json exits) {
  json summary;
  auto per_rank = coordinator_->summaries();
  if (status_ == "completed" && !per_rank && !python_) {
    end("failed", "workers exited without reporting a summary");
  }
  if (per_rank && python_) {
    summary = python_summary(*per_rank, cfg_, wall);
  } else if (per_rank) {
    summary = aggregate_summary(*per_rank, cfg_, wall);
  } else {
    summary = {{"name", cfg_.name}, {"world_size", cfg_.workers}, {"wall_seconds", wall}};
  }
  const auto& rs = coordinator_->recovery_stats();
  summary["recoveries"] = rs.recoveries;
  summary["recovery_seconds_max"] = rs.recovery_seconds_max;
  summary["steps_rolled_back"] = rs.steps_rolled_back;
  summary["final_world_size"] = per_rank ? per_rank->size() : coordinator_->members().size();
  summary["workers_lost"] = losses_.size();
  summary["restarts"] = restarts_;
  summary["membership_epoch"] = coordinator_->epoch();
  if (servers_) summary["servers"] = servers_->summary();
  if (!coordinator_->took_over_from().empty()) {
    summary["took_over_from"] = coordinator_->took_over_from();
    if (coordinator_->takeover_seconds() >= 0)
      summary["coordinator_takeover_seconds"] = coordinator_->takeover_seconds();
  }
  summary["exits"] = std::move(exits);
  summary["status"] = status_;
  if (!error_.empty()) summary["error"] = error_;
  return summary;
}

int JobLaunch::finish() {
  // Workers that still run (started elsewhere, or by a predecessor) leave when told.
  coordinator_->end_job(status_);
  // The last statuses: a short job may end before the once-a-second check saw a full window.
  if (cfg_.workers > 1) check_stragglers();
  for (auto& m : coordinator_->poll_metrics()) {
    metrics_ << m.dump() << "\n";
    progress_.record(m);
    if (console_) console_->monitor().add_metric(m);
  }
  progress_.end_line();
  json exits = json::object();  // how each worker process ended, by rank
  if (group_) exits["mpirun"] = group_->terminate(std::chrono::seconds(5)).describe();
  for (auto& [r, w] : workers_) {
    // A worker the job went on without may be stopped: SIGTERM would wait for it to be resumed.
    if (coordinator_->is_lost(r)) w.signal(SIGKILL);
    exits[std::to_string(r)] = w.terminate(std::chrono::seconds(5)).describe();
  }
  if (servers_) servers_->stop();
  comm::transport::ShmSegment::remove_orphans_of(::getpid());  // of workers killed in setup
  const double wall = std::chrono::duration<double>(Clock::now() - start_).count();
  const json summary = summarize(wall, std::move(exits));
  write_file_atomically(run_dir_ / "summary.json", summary.dump(2) + "\n");
  events_->write({{"event", "job_" + status_}, {"error", error_}});
  spdlog::info("job {}{}", status_, error_.empty() ? "" : ": " + error_);
  if (console_) console_->monitor().finish(status_, summary);
  coordinator_->forget_job();
  if (readoptable_) {
    fs::remove(record_path(run_dir_));
    if (own_token_file_) fs::remove(token_file_);
  }

  if (status_ == "completed") {
    if (python_) {
      print_python_report(summary, run_dir_.string());
    } else {
      print_report(summary, run_dir_.string());
    }
    return 0;
  }
  std::fprintf(stderr, "\ncohort: job %s: %s\n", status_.c_str(), error_.c_str());
  if (status_ == "failed") {
    for (auto& [r, w] : workers_) {
      auto st = w.poll();
      if (st && !st->ok() && st->signal != SIGTERM && st->signal != SIGKILL) {
        auto log = run_dir_ / "logs" / ("rank-" + std::to_string(r) + ".log");
        std::fprintf(stderr, "--- last lines of %s ---\n%s\n", log.c_str(), tail_of(log).c_str());
        break;
      }
    }
  }
  return status_ == "cancelled" ? 130 : 1;
}

}  // namespace cohort::cli::detail
