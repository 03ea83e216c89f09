#include "cohort/monitor/console_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "cohort/base/clock.h"
#include "cohort/base/error.h"
#include "cohort/base/log.h"
#include "cohort/monitor/web_assets.h"

namespace cohort::monitor {

using nlohmann::json;

namespace {

constexpr auto kJson = "application/json";

void send_asset(httplib::Response& res, std::string_view name) {
  const WebAsset* a = find_web_asset(name);
  if (!a) {
    send_json(res, {{"error", "no such file: " + std::string(name)}}, 404);
    return;
  }
  res.set_content(std::string(a->body), content_type_for(name).c_str());
}

// One event stream: the first call sends everything so far, later ones what changed since; a
// comment line every 15 s keeps proxies from closing an idle stream.
bool stream_step(const JobMonitor& job, JobMonitor::Cursor& cursor, const ConsoleServer& server,
                 httplib::DataSink& sink) {
  if (cursor.version != 0) {
    // A keep-alive each second: a write is how a stream learns that its client has gone.
    auto quiet_until = Clock::now() + std::chrono::seconds(1);
    while (job.wait_for_change(cursor.version, std::chrono::milliseconds(250)) == cursor.version) {
      if (server.stopping() || !sink.is_writable()) return false;
      if (Clock::now() >= quiet_until) {
        static const std::string kKeepAlive = ": keep-alive\n\n";
        return sink.write(kKeepAlive.data(), kKeepAlive.size());
      }
    }
    if (server.stopping()) return false;
  }
  std::string msg = "event: update\ndata: " + job.delta(cursor).dump() + "\n\n";
  if (!sink.write(msg.data(), msg.size())) return false;
  // At most five updates a second per stream, however often the job changes.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  return true;
}

}  // namespace

void send_json(httplib::Response& res, const nlohmann::json& body, int status) {
  res.status = status;
  res.set_header("Cache-Control", "no-store");
  // Replace, not throw: an error may quote a request's path or headers, which can hold any bytes.
  res.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), kJson);
}

const WebAsset* find_web_asset(std::string_view name) {
  for (const auto& a : web_assets()) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

std::string content_type_for(std::string_view name) {
  auto ends = [&](std::string_view ext) {
    return name.size() >= ext.size() && name.substr(name.size() - ext.size()) == ext;
  };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".js")) return "text/javascript; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  if (ends(".svg")) return "image/svg+xml";
  return "application/octet-stream";
}

ConsoleServer::ConsoleServer(ConsoleServerOptions options)
    : options_(std::move(options)), server_(std::make_unique<httplib::Server>()) {
  const int threads = options_.threads;
  server_->new_task_queue = [threads] {
    return new httplib::ThreadPool(static_cast<size_t>(threads));
  };
  server_->set_keep_alive_timeout(2);
  // SO_REUSEADDR only: the library's default adds SO_REUSEPORT, with which a second console on
  // the same port would bind too and the kernel would split the connections between them.
  server_->set_socket_options([](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  server_->set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown error";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        spdlog::warn("console: {} {}: {}", req.method, req.path, what);
        send_json(res, {{"error", what}}, 500);
      });
}

ConsoleServer::~ConsoleServer() {
  stop();
}

httplib::Server& ConsoleServer::http() {
  return *server_;
}

void ConsoleServer::add_job(const std::string& prefix, std::shared_ptr<const JobMonitor> job) {
  if (!prefix.empty()) {
    server_->Get(prefix, [prefix](const httplib::Request&, httplib::Response& res) {
      res.set_redirect(prefix + "/");
    });
  }
  // No group in the prefix: every route's first group is its own, and the key is ignored.
  add_jobs("()" + prefix, [job](const std::string&) { return job; });
}

void ConsoleServer::add_jobs(const std::string& prefix, JobFinder find) {
  auto& s = *server_;
  // Runs `f` with the job the request's first group names, or answers 404.
  auto with_job = [find](auto f) {
    return [find, f](const httplib::Request& req, httplib::Response& res) {
      std::shared_ptr<const JobMonitor> job = find(req.matches[1].str());
      if (!job) {
        send_json(res, {{"error", "no such job: " + req.matches[1].str()}}, 404);
        return;
      }
      f(*job, job, req, res);
    };
  };
  using Req = const httplib::Request&;
  using Res = httplib::Response&;
  using Ptr = std::shared_ptr<const JobMonitor>;
  s.Get(prefix + "/",
        with_job([](const JobMonitor&, Ptr, Req, Res res) { send_asset(res, "console.html"); }));
  s.Get(prefix + R"(/assets/([A-Za-z0-9_.-]+))",
        [](Req req, Res res) { send_asset(res, req.matches[2].str()); });
  s.Get(prefix + "/api/job",
        with_job([](const JobMonitor& j, Ptr, Req, Res res) { send_json(res, j.job()); }));
  s.Get(prefix + "/api/workers",
        with_job([](const JobMonitor& j, Ptr, Req, Res res) { send_json(res, j.workers()); }));
  s.Get(prefix + "/api/servers",
        with_job([](const JobMonitor& j, Ptr, Req, Res res) { send_json(res, j.servers()); }));
  s.Get(prefix + "/api/events",
        with_job([](const JobMonitor& j, Ptr, Req, Res res) { send_json(res, j.events()); }));
  s.Get(
      prefix + "/api/metrics", with_job([](const JobMonitor& j, Ptr, Req req, Res res) {
        int64_t since = -1;
        if (req.has_param("since")) {
          std::string v = req.get_param_value("since");
          auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), since);
          if (ec != std::errc() || end != v.data() + v.size()) {
            send_json(res, {{"error", "since: expected an integer step, got \"" + v + "\""}}, 400);
            return;
          }
        }
        send_json(res, j.metrics_since(since));
      }));
  s.Get(prefix + "/metrics", with_job([](const JobMonitor& j, Ptr, Req, Res res) {
          res.set_content(j.prometheus(), "text/plain; version=0.0.4; charset=utf-8");
        }));
  s.Get(prefix + "/api/stream", with_job([this](const JobMonitor&, Ptr job, Req, Res res) {
          if (streams_.fetch_add(1) >= options_.max_streams) {
            streams_.fetch_sub(1);
            send_json(res,
                      {{"error", "too many event streams open (" +
                                     std::to_string(options_.max_streams) + "); poll /api/job"}},
                      503);
            return;
          }
          res.set_header("Cache-Control", "no-store");
          res.set_header("X-Accel-Buffering", "no");
          auto cursor = std::make_shared<JobMonitor::Cursor>();
          res.set_chunked_content_provider(
              "text/event-stream",
              [this, job, cursor](size_t, httplib::DataSink& sink) {
                return stream_step(*job, *cursor, *this, sink);
              },
              [this](bool) { streams_.fetch_sub(1); });
        }));
}

void ConsoleServer::start() {
  if (options_.port == 0) {
    int port = server_->bind_to_any_port(options_.bind_host);
    if (port <= 0) {
      throw Error("console: cannot listen on " + options_.bind_host +
                  " (any port): " + std::strerror(errno));
    }
    port_ = static_cast<uint16_t>(port);
  } else {
    if (!server_->bind_to_port(options_.bind_host, options_.port)) {
      throw Error("console: cannot listen on " + options_.bind_host + ":" +
                  std::to_string(options_.port) + ": " + std::strerror(errno) +
                  " (is another console on that port? dashboard.port: 0 picks a free one)");
    }
    port_ = options_.port;
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  // stop() only stops a server that is already listening: wait for it to be.
  auto deadline = Deadline::after(std::chrono::seconds(10));
  while (!server_->is_running() && !deadline.expired()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void ConsoleServer::stop() {
  stopping_ = true;
  if (thread_.joinable()) {
    server_->stop();
    thread_.join();
  }
}

std::string ConsoleServer::url() const {
  std::string host = options_.bind_host;
  if (host.empty() || host == "0.0.0.0" || host == "::") host = "127.0.0.1";
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  return "http://" + host + ":" + std::to_string(port_) + "/";
}

}  // namespace cohort::monitor
