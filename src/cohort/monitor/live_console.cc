#include "cohort/monitor/live_console.h"

#include "cohort/store/connect.h"

namespace cohort::monitor {

LiveConsole::LiveConsole(const LiveConsoleOptions& options)
    : monitor_(std::make_shared<JobMonitor>(options.job)) {
  server_ = std::make_unique<ConsoleServer>(
      ConsoleServerOptions{.bind_host = options.bind_host, .port = options.port});
  server_->add_job("", monitor_);
  server_->start();
  monitor_->set_console_url(server_->url());
  poller_ = std::make_unique<StatusPoller>(store::connect(options.store, {.token = options.token}),
                                           *monitor_, options.job.world_size);
  poller_->start();
}

LiveConsole::~LiveConsole() {
  poller_.reset();
  server_.reset();
}

}  // namespace cohort::monitor
