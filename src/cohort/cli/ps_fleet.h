// The parameter servers of a job whose sync.mode is ssp or async, as `cohort run` keeps them:
// their settings in the job's store, their processes (logs/server-I.log), the views that say which
// server holds which shard (ps/view.h), and a replacement for every server that dies. A shard lost
// with both its copies ends the job.
#pragma once

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cohort/cli/launchers.h"
#include "cohort/elastic/process.h"
#include "cohort/ps/server.h"
#include "cohort/ps/view.h"
#include "cohort/train/config.h"

namespace cohort::comm {
class Work;
}
namespace cohort::ps {
class Client;
}

namespace cohort::cli {

class EventLog;

// Replacements of its servers a job may use up in all, per server (locally, and as the backoffLimit
// of a Kubernetes job's servers): a server that keeps dying is a bug to see.
inline constexpr int kRestartsPerServer = 3;

// The servers' settings as the job file gives them.
ps::ServerSettings server_settings(const train::JobConfig& cfg);

class ServerFleet {
 public:
  // Publishes the settings in `store` (the launcher's connection to the job's store). With
  // `external`, the servers are started elsewhere (`cohort ps-server --join ... --index I`).
  // Its servers are started with `starter` (which outlives it).
  ServerFleet(const train::JobConfig& cfg, store::Store& store, const WorkerCommand& command,
              ProcessStarter& starter, std::string log_dir, bool external, EventLog& events);
  ~ServerFleet();

  // Starts every server (unless external).
  void start();
  // Processes that ended, heartbeats, registrations; replacements for lost servers. Returns why
  // the job cannot go on, once it cannot.
  std::optional<std::string> tick();
  // When no replacement worker will come any more: the slots whose workers are not among
  // `members` (job ranks) are retired, their clocks stop counting, so that the others are not
  // held back waiting for them (their data's rest is not trained).
  void retire_orphans(const std::vector<int>& members);
  // Stops every server it started (at the end of the job).
  void stop();
  // This launcher lost the lead of the job (etcd): the servers are the job's, and go on for the
  // standby that takes it over; stop() then stops nothing.
  void release();
  nlohmann::json summary() const;
  // The console's rows (ps::ViewManager::rows with each server's pid).
  nlohmann::json rows() const;
  // The command that starts server `index` elsewhere (printed for --external-workers).
  std::string external_command(int index, const std::string& token_file) const;

 private:
  void spawn(int index);
  // Records the retirements that completed; one that failed is tried again by retire_orphans.
  void collect_retirements();

  const train::JobConfig& cfg_;
  store::Store& store_;
  WorkerCommand command_;
  ProcessStarter& starter_;
  std::string log_dir_;
  bool external_;
  EventLog& events_;
  ps::ViewManager manager_;
  std::map<int, elastic::ChildProcess> processes_;
  std::vector<int> retired_;
  // Retirements under way (a shard without parameters yet answers once a worker set them).
  std::map<int, std::shared_ptr<comm::Work>> retiring_;
  int restarts_ = 0, lost_ = 0;
  std::unique_ptr<ps::Client> control_;  // for retirements
  bool released_ = false;
};

}  // namespace cohort::cli
