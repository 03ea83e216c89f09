// `cohort serve`'s HTTP API (monitor/job_server.h, monitor/http_access.h) on any request: the
// fuzz input is sent as the bytes of one connection to a real server on loopback, which answers
// or closes; it must never crash, hang or accept a change of state without its token. The seed
// corpus holds real requests (the token below included), so mutations reach every route.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "cohort/base/error.h"
#include "cohort/base/log.h"
#include "cohort/monitor/job_server.h"

namespace {

constexpr const char* kToken = "fuzz-token-0123456789abcdef";
std::unique_ptr<cohort::monitor::JobServer> g_server;
uint16_t g_port = 0;

void start_server() {
  namespace fs = std::filesystem;
  const fs::path home =
      fs::temp_directory_path() / ("cohort-http-fuzz-" + std::to_string(getpid()));
  fs::remove_all(home);
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
  static uint32_t next_source = 0;
  sockaddr_in source{};
  source.sin_family = AF_INET;
  source.sin_addr.s_addr = htonl(0x7f010000u | (next_source++ & 0xffffu));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&source), sizeof(source)) != 0) __builtin_trap();
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) __builtin_trap();
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
  while (got < (64u << 10)) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, got == 0 ? 10000 : 2000) <= 0) {
      answered = got > 0;
      break;
    }
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
  if (exchange(data, size)) return 0;
  // No answer on this connection. A server that still answers a plain request on a new one has
  // dropped a connection it could not parse without closing it - slow, not stuck (loopback under
  // this load also loses the odd connection in the kernel); one that does not is hung.
  static const std::string kPlain = "GET /api/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  if (!exchange(reinterpret_cast<const uint8_t*>(kPlain.data()), kPlain.size())) {
    std::fprintf(stderr, "console_http_fuzzer: the server answers nothing for 10 s\n");
    __builtin_trap();
  }
  std::fprintf(stderr,
               "console_http_fuzzer: no answer on one connection in 10 s; the server still "
               "answers\n");
  return 0;
}
