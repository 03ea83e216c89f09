// `cohort serve`: the long-lived console over every job of this machine, with their history in
// SQLite (monitor/job_server.h). Jobs come from `cohort submit`; a job file is validated here
// exactly as `cohort run` validates it.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <thread>

#include "cohort/base/error.h"
#include "cohort/base/file.h"
#include "cohort/base/secret.h"
#include "cohort/cli/args.h"
#include "cohort/elastic/process.h"
#include "cohort/monitor/job_server.h"
#include "cohort/train/config.h"

namespace cohort::cli {
namespace {

std::atomic<int> g_serve_stop{0};
void on_serve_stop(int sig) {
  g_serve_stop = sig;
}

std::string default_home() {
  if (const char* h = std::getenv("COHORT_HOME"); h && *h) return h;
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cohort";
  return ".cohort";
}

int usage(std::ostream& os, int code) {
  os << "usage: cohort serve [--home DIR] [--bind HOST] [--port P] [--max-workers N]\n"
        "                    [--token-file F] [--open-read]\n\n"
        "Serves the console of every job on this machine and runs the jobs submitted to it\n"
        "(cohort submit), in order, when enough workers are free.\n"
        "  --home DIR        history.db and the jobs' run directories ($COHORT_HOME, ~/.cohort)\n"
        "  --bind HOST       where to listen (127.0.0.1)\n"
        "  --port P          the port (8090; 0: any free one)\n"
        "  --max-workers N   worker processes running at once, all jobs together (CPUs)\n"
        "  --token-file F    the token that submitting and cancelling need: read from F, or\n"
        "                    written to F (mode 0600) when F does not exist (DIR/serve.token)\n"
        "  --open-read       pages and reads without the token also when --bind is not\n"
        "                    loopback (on loopback they are always open)\n";
  return code;
}

}  // namespace

int serve_main(int argc, char** argv) {
  Args args(argc, argv, {"home", "bind", "port", "max-workers", "token-file"},
            {"help", "open-read"});
  if (args.has("help")) return usage(std::cout, 0);
  if (!args.positionals().empty()) return usage(std::cerr, 2);
  const long port = args.get_int("port", 8090);
  if (port < 0 || port > 65535) throw ConfigError("--port: expected a port number in [0, 65535]");
  const long max_workers = args.get_int("max-workers", 0);
  if (max_workers < 0) throw ConfigError("--max-workers: expected a positive number");

  const std::string home = args.get_or("home", default_home());
  std::filesystem::create_directories(home);
  const std::string token_file =
      args.get_or("token-file", (std::filesystem::path(home) / "serve.token").string());
  std::string token;
  if (std::filesystem::exists(token_file)) {
    token = read_secret_file(token_file, "--token-file");
  } else {
    token = random_token();
    write_secret_file(token_file, token);
  }
  monitor::JobServer server({
      .home = home,
      .bind_host = args.get_or("bind", "127.0.0.1"),
      .port = static_cast<uint16_t>(port),
      .max_workers = static_cast<int>(max_workers),
      .cohort_binary = elastic::self_executable(),
      .validate =
          [](const std::string& yaml, const std::string& source,
             const std::vector<std::string>& overrides) {
            train::LoadOptions opts;
            opts.overrides = overrides;
            train::JobConfig cfg = train::parse_job_config(yaml, source, opts);
            return monitor::ValidatedJob{.name = cfg.name,
                                         .workers = static_cast<int>(cfg.workers),
                                         .resolved_yaml = train::to_yaml(cfg)};
          },
      .token = token,
      .open_reads = args.has("open-read"),
  });
  struct sigaction sa {};
  sa.sa_handler = on_serve_stop;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  server.start();
  // Where `cohort submit`, `jobs`, `cancel` and `logs` find this server by default.
  write_file_atomically(std::filesystem::path(home) / "serve.url", server.url() + "\n");
  std::printf("cohort serve: console at %s (home %s, token in %s)\n", server.url().c_str(),
              home.c_str(), token_file.c_str());
  std::fflush(stdout);
  while (!g_serve_stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::printf("cohort serve: stopping\n");
  std::fflush(stdout);
  server.stop();
  return 0;
}

}  // namespace cohort::cli
