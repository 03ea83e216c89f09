// `cohort serve`'s HTTP API (monitor/job_server.h, monitor/http_access.h) on any request: the
// fuzz input is sent as the bytes of one connection to a real server on loopback, which answers
// or closes; it must never crash, hang or accept a change of state without its token. The seed
// corpus holds real requests (the token below included), so mutations reach every route.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "cohort/base/error.h"
#include "cohort/base/log.h"
#include "cohort/monitor/job_history.h"
#include "cohort/monitor/job_server.h"

namespace {

constexpr const char* kToken = "fuzz-token-0123456789abcdef";
std::unique_ptr<cohort::monitor::JobServer> g_server;
std::unique_ptr<cohort::monitor::JobHistory> g_history;  // a second connection, to check on it
uint16_t g_port = 0;

void start_server() {
  namespace fs = std::filesystem;
  const fs::path home =
      fs::temp_directory_path() / ("cohort-http-fuzz-" + std::to_string(getpid()));
  fs::remove_all(home);
  fs::create_directories(home);
  {
    // Two jobs for the routes that need one: 1 queued (it needs more workers than the server
    // has, so it never starts), 2 finished, with a summary, metrics and events.
    cohort::monitor::JobHistory history((home / "history.db").string());
    history.add({.name = "queued", .state = "queued", .workers = 2, .config_yaml = "ok"});
    const int64_t done = history.add({.name = "done",
                                      .state = "completed",
                                      .workers = 1,
                                      .config_yaml = "ok",
                                      .submitted = 1,
                                      .started = 2,
                                      .finished = 3,
                                      .summary = {{"status", "completed"}, {"steps", 10}}});
    history.add_metric(done, {{"step", 10}, {"loss", 0.5}, {"samples_per_sec", 100.0}});
    history.add_event(done, {{"time", 2.5}, {"event", "checkpoint"}});
  }
  g_history = std::make_unique<cohort::monitor::JobHistory>((home / "history.db").string());
  g_server = std::make_unique<cohort::monitor::JobServer>(cohort::monitor::JobServerOptions{
      .home = home.string(),
      .bind_host = "127.0.0.1",
      .port = 0,
      .max_workers = 1,
      .cohort_binary = "/bin/false",
      // A job is refused unless it is a single line "ok", which then needs more workers than the
      // server has: the whole submit path runs, but no job is ever started (a fork of this
      // process, with ASan's shadow memory, stalls every thread of it for seconds; the scheduler
      // has tests of its own, tests/e2e/serve_test.cc).
      .validate =
          [](const std::string& yaml, const std::string& source, const std::vector<std::string>&) {
            if (yaml != "ok") throw cohort::ConfigError(source + ":1:1: not a job");
            return cohort::monitor::ValidatedJob{
                .name = "fuzz", .workers = 2, .resolved_yaml = yaml};
          },
      .token = kToken});
  // The logger before the exit handler below: static destruction runs in reverse order, and the
  // server's threads log while it stops.
  spdlog::default_logger_raw();
  g_server->start();
  const std::string url = g_server->url();
  g_port = static_cast<uint16_t>(std::stoi(url.substr(url.rfind(':') + 1)));
  std::atexit([] {
    g_server->stop();
    std::filesystem::remove_all(std::filesystem::temp_directory_path() /
                                ("cohort-http-fuzz-" + std::to_string(getpid())));
  });
}

// Sends `data` as one connection's bytes and reads the answer: until the server closes, or for
// 2 s once it has answered (an event stream never ends by itself), or 64 KiB. Returns false when
// neither an answer nor a close came within 10 s.
bool exchange(const uint8_t* data, size_t size) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(g_port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // Each connection from another loopback address (127.1.0.0/16): thousands a second from one
  // address run through its ephemeral ports while the server's side of the earlier connections
  // is still in TIME_WAIT.
  // The port is picked at connect (IP_BIND_ADDRESS_NO_PORT), against the whole address pair; a
  // connect that still fails is tried from the next address.
  static uint32_t next_source = 0;
  for (int attempt = 0;; ++attempt) {
    if (attempt == 16) __builtin_trap();  // no connection to the server at all
    if (attempt > 0) {
      ::close(fd);
      fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
    sockaddr_in source{};
    source.sin_family = AF_INET;
    source.sin_addr.s_addr = htonl(0x7f010000u | (next_source++ & 0xffffu));
    if (::bind(fd, reinterpret_cast<sockaddr*>(&source), sizeof(source)) != 0) continue;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) break;
  }
  size_t off = 0;
  while (off < size) {
    ssize_t k = ::send(fd, data + off, size - off, MSG_NOSIGNAL);
    if (k <= 0) break;  // the server may close early on a bad request
    off += static_cast<size_t>(k);
  }
  ::shutdown(fd, SHUT_WR);
  char buf[4096];
  size_t got = 0;
  bool answered = true;
  using Clock = std::chrono::steady_clock;
  Clock::time_point until = Clock::now() + std::chrono::seconds(10);  // for the first byte
  while (got < (64u << 10)) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) {
      answered = got > 0;
      break;
    }
    if (got == 0) until = Clock::now() + std::chrono::seconds(2);  // then 2 s in all
    ssize_t k = ::recv(fd, buf, sizeof(buf), 0);
    if (k <= 0) break;
    got += static_cast<size_t>(k);
  }
  ::close(fd);
  return answered;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (!g_server) start_server();
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const bool has_token = input.find(kToken) != std::string_view::npos;
  const bool answered = exchange(data, size);
  // The queued job changes only by a cancel that carries the token.
  if (input.find("cancel") != std::string_view::npos) {
    auto job = g_history->get(1);
    if (!job) __builtin_trap();
    if (job->state != "queued") {
      if (!has_token) {
        std::fprintf(stderr, "console_http_fuzzer: job 1 is %s after a request without the token\n",
                     job->state.c_str());
        __builtin_trap();
      }
      job->state = "queued";  // for the inputs after this one
      job->finished = 0;
      job->error.clear();
      g_history->update(*job);
    }
  }
  if (answered) return 0;
  // No answer on this connection. A server that still answers a plain request on a new one has
  // dropped a connection it could not parse without closing it - slow, not stuck (loopback under
  // this load also loses the odd connection in the kernel); one that does not is hung.
  static const std::string kPlain = "GET /api/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  if (!exchange(reinterpret_cast<const uint8_t*>(kPlain.data()), kPlain.size())) {
    std::fprintf(stderr, "console_http_fuzzer: the server answers nothing for 10 s\n");
    __builtin_trap();
  }
  // Once is the kernel's; again and again is connections the server drops without closing.
  static int stalls = 0;
  std::fprintf(stderr,
               "console_http_fuzzer: no answer on one connection in 10 s (%d so far); the "
               "server still answers\n",
               ++stalls);
  if (stalls > 3) __builtin_trap();
  return 0;
}
