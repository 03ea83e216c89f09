// LiveConsole: the web console of one running job, as `cohort run` starts it when the job file has
// a `dashboard:` section. It owns the job's JobMonitor, a StatusPoller reading the workers'
// published status from the coordinator's store, and the ConsoleServer.
#pragma once

#include <memory>
#include <string>

#include "cohort/monitor/console_server.h"
#include "cohort/monitor/job_monitor.h"
#include "cohort/monitor/status_poller.h"
#include "cohort/net/socket.h"

namespace cohort::monitor {

struct LiveConsoleOptions {
  std::string bind_host = "127.0.0.1";
  uint16_t port = 0;
  std::string store;  // the job's store, as workers join it (store/connect.h)
  std::string token;  // the job token, for the store
  JobInfo job;
};

class LiveConsole {
 public:
  // Starts serving at once; throws Error if the address cannot be bound.
  explicit LiveConsole(const LiveConsoleOptions& options);
  ~LiveConsole();

  JobMonitor& monitor() { return *monitor_; }
  std::string url() const { return server_->url(); }

 private:
  std::shared_ptr<JobMonitor> monitor_;
  std::unique_ptr<StatusPoller> poller_;
  std::unique_ptr<ConsoleServer> server_;
};

}  // namespace cohort::monitor
