#include "cohort/monitor/live_console.h"

#include "cohort/store/tcp_store.h"

namespace cohort::monitor {

LiveConsole::LiveConsole(const LiveConsoleOptions& options)
    : monitor_(std::make_shared<JobMonitor>(options.job)) {
  server_ = std::make_unique<ConsoleServer>(
      ConsoleServerOptions{.bind_host = options.bind_host, .port = options.port});
  server_->add_job("", monitor_);
  server_->start();
  monitor_->set_console_url(server_->url());
  net::Endpoint store = options.store;
  if (store.host.empty() || store.host == "0.0.0.0" || store.host == "::") store.host = "127.0.0.1";
  poller_ = std::make_unique<StatusPoller>(std::make_unique<store::TcpStore>(store, options.token),
                                           *monitor_, options.job.world_size);
  poller_->start();
}

LiveConsole::~LiveConsole() {
  poller_.reset();
  server_.reset();
}

}  // namespace cohort::monitor
