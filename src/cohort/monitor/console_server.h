// ConsoleServer: the HTTP server of the web console (cpp-httplib), on threads of its own.
//
// For each job added under a prefix ("" for the job of `cohort run`) it serves:
//   GET <prefix>/                    the console page (web/console.html) and its assets/...
//   GET <prefix>/api/job             the job: state, progress, ETA, loss, config, summary
//   GET <prefix>/api/workers         one row per worker
//   GET <prefix>/api/metrics?since=S progress records with step > S (all without since)
//   GET <prefix>/api/events          the event log
//   GET <prefix>/api/stream          server-sent events: "update" with the job, the workers and
//                                    the metrics and events added since the previous one; a
//                                    keep-alive comment each second without one, so that a
//                                    stream whose client has gone ends within seconds
//   GET <prefix>/metrics             Prometheus text format
// It binds to loopback unless told otherwise; the console is read-only.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "cohort/monitor/job_monitor.h"

namespace httplib {
class Server;
struct Response;
}  // namespace httplib

namespace cohort::monitor {

// A JSON reply that never fails: bytes that are not UTF-8 (an error quoting a request) become
// U+FFFD. No caching.
void send_json(httplib::Response& res, const nlohmann::json& body, int status = 200);

struct ConsoleServerOptions {
  std::string bind_host = "127.0.0.1";
  uint16_t port = 0;  // 0: any free port
  int threads = 32;   // each open event stream holds one
  // Event streams open at once; more are answered 503, so that streams (browser tabs, or a
  // client that opens many) never take every thread from the rest of the API.
  int max_streams = 16;
};

class ConsoleServer {
 public:
  explicit ConsoleServer(ConsoleServerOptions options);
  ~ConsoleServer();
  ConsoleServer(const ConsoleServer&) = delete;
  ConsoleServer& operator=(const ConsoleServer&) = delete;

  // Serves `job` under `prefix` ("" or "/jobs/<id>"). Call before start().
  void add_job(const std::string& prefix, std::shared_ptr<const JobMonitor> job);
  // Serves many jobs under a prefix pattern whose first group picks the job (e.g. "/jobs/(\\d+)"):
  // `find` maps that group to a job, or nullptr for a 404. Call before start().
  using JobFinder = std::function<std::shared_ptr<const JobMonitor>(const std::string& key)>;
  void add_jobs(const std::string& prefix_pattern, JobFinder find);
  // The underlying server, for routes of a caller's own (cohort serve). Call before start().
  httplib::Server& http();

  // Binds and starts serving; throws Error if the address cannot be bound.
  void start();
  void stop();
  uint16_t port() const { return port_; }
  // http://HOST:PORT/ (loopback when bound to a wildcard address).
  std::string url() const;
  bool stopping() const { return stopping_.load(); }

 private:
  ConsoleServerOptions options_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> streams_{0};
  uint16_t port_ = 0;
};

}  // namespace cohort::monitor
