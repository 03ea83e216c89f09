// `cohort run [options] train.py [the script's arguments]`: a Python training script launched the
// way torchrun launches it, so that a script written for torchrun runs unchanged (RANK,
// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; init_process_group's env://
// rendezvous finds the store this launcher serves, as torchrun's agent serves its own), and the
// way `cohort run` runs a job: a run directory with every rank's log (logs/rank-N.log),
// events.jsonl and summary.json, Ctrl-C stopping every worker, no worker outliving the launcher.
// The first worker that fails ends the job (its log's tail is printed); the others are stopped.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "cohort/base/clock.h"
#include "cohort/base/error.h"
#include "cohort/base/file.h"
#include "cohort/base/log.h"
#include "cohort/cli/args.h"
#include "cohort/cli/job_files.h"
#include "cohort/elastic/process.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace cohort::cli {

namespace {

std::atomic<int> g_python_stop{0};

void on_python_stop(int sig) {
  g_python_stop = sig;
}

int python_usage(std::ostream& os, int code) {
  os << "usage: cohort run [options] SCRIPT.py [the script's arguments...]\n"
        "options: --workers N           worker processes (1)\n"
        "         --python PATH         the interpreter (/usr/bin/python3)\n"
        "         --threads-per-worker T  OMP_NUM_THREADS of each (CPUs / workers, at least 1)\n"
        "         --run-dir DIR         where logs, events.jsonl and summary.json go\n"
        "                               (runs/<script>-<time>)\n"
        "         --port P              the rendezvous store's port (any free one)\n"
        "         --token-file F        the job token (COHORT_TOKEN of every worker)\n\n"
        "Everything after the script is the script's. Each worker gets torchrun's variables\n"
        "(RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), so\n"
        "init_process_group(\"cohort\") (after `import cohort`) or any other backend finds its\n"
        "peers through this launcher's store.\n";
  return code;
}

std::string stamp() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", &tm);
  return buf;
}

std::string tail_of_file(const fs::path& p, size_t max_bytes = 2000) {
  std::ifstream in(p, std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return s.size() > max_bytes ? "..." + s.substr(s.size() - max_bytes) : s;
}

}  // namespace

// Where `cohort run`'s first argument that is not an option (nor an option's value) is, when it
// names a Python script; -1 otherwise (a job file, or nothing).
int python_script_at(int argc, char** argv) {
  static const std::set<std::string> kValued = {"set",     "run-dir", "resume",
                                                "bind",    "port",    "token-file",
                                                "workers", "python",  "threads-per-worker"};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--", 0) == 0) {
      if (a.find('=') == std::string::npos && kValued.count(a.substr(2))) ++i;
      continue;
    }
    return a.size() > 3 && a.compare(a.size() - 3, 3, ".py") == 0 ? i : -1;
  }
  return -1;
}

int run_python_main(int argc, char** argv) {
  // The script and what follows it are the script's.
  const int script_at = python_script_at(argc, argv);
  if (script_at < 0) return python_usage(std::cerr, 2);
  Args args(script_at, argv,
            {"workers", "python", "threads-per-worker", "run-dir", "port", "token-file"}, {"help"});
  if (args.has("help")) return python_usage(std::cout, 0);
  if (!args.positionals().empty()) return python_usage(std::cerr, 2);
  const fs::path script = fs::absolute(argv[script_at]);
  if (!fs::is_regular_file(script)) throw ConfigError("no such script: " + script.string());
  std::vector<std::string> script_args(argv + script_at + 1, argv + argc);
  const int workers = args.get_int("workers", 1);
  if (workers < 1) throw ConfigError("--workers must be at least 1");
  const std::string python = args.get_or("python", "/usr/bin/python3");
  const int cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = args.get_int("threads-per-worker", std::max(1, cpus / workers));

  const fs::path run_dir = args.has("run-dir")
                               ? fs::path(*args.get("run-dir"))
                               : fs::path("runs") / (script.stem().string() + "-" + stamp());
  fs::create_directories(run_dir / "logs");
  EventLog events(run_dir / "events.jsonl");
  log::add_file((run_dir / "logs" / "launcher.log").string());
  const std::string token = job_token(args.get_or("token-file", ""));

  // The rendezvous store every worker's env:// connects to (TORCHELASTIC_USE_AGENT_STORE: none
  // of them starts one), as torchrun's agent serves it; it lives as long as the job.
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<uint16_t>(args.get_int("port", 0));
  store_options.isServer = true;
  store_options.waitWorkers = false;
  store_options.numWorkers = static_cast<size_t>(workers);
  c10d::TCPStore store("127.0.0.1", store_options);
  const std::string port = std::to_string(store.getPort());
  const std::string run_id = run_dir.filename().string();

  events.write({{"event", "job_started"},
                {"script", script.string()},
                {"args", script_args},
                {"workers", workers},
                {"store", "127.0.0.1:" + port}});
  std::printf("cohort: %s with %d workers, run directory %s\n", script.filename().c_str(), workers,
              run_dir.c_str());
  std::fflush(stdout);

  struct sigaction sa {};
  sa.sa_handler = on_python_stop;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  const auto started = Clock::now();
  std::map<int, elastic::ChildProcess> procs;
  for (int r = 0; r < workers; ++r) {
    const std::string log = (run_dir / "logs" / ("rank-" + std::to_string(r) + ".log")).string();
    std::vector<std::string> argv_child = {"-u", script.string()};
    argv_child.insert(argv_child.end(), script_args.begin(), script_args.end());
    auto child = elastic::ChildProcess::spawn({
        .executable = python,
        .args = argv_child,
        .env = {{"RANK", std::to_string(r)},
                {"LOCAL_RANK", std::to_string(r)},
                {"GROUP_RANK", "0"},
                {"ROLE_RANK", std::to_string(r)},
                {"WORLD_SIZE", std::to_string(workers)},
                {"LOCAL_WORLD_SIZE", std::to_string(workers)},
                {"ROLE_WORLD_SIZE", std::to_string(workers)},
                {"MASTER_ADDR", "127.0.0.1"},
                {"MASTER_PORT", port},
                {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                // What torchrun's workers also see (env:// reads the restart count).
                {"TORCHELASTIC_RESTART_COUNT", "0"},
                {"TORCHELASTIC_MAX_RESTARTS", "0"},
                {"TORCHELASTIC_RUN_ID", run_id},
                {"GROUP_WORLD_SIZE", "1"},
                {"ROLE_NAME", "default"},
                {"COHORT_TOKEN", token},
                {"COHORT_RUN_DIR", fs::absolute(run_dir).string()},  // hang reports go there
                {"OMP_NUM_THREADS", std::to_string(threads)}},
        .stdout_path = log,
        .stderr_path = log,
    });
    events.write({{"event", "worker_started"}, {"rank", r}, {"pid", child.pid()}});
    procs.emplace(r, std::move(child));
  }

  std::string status = "completed", error;
  std::map<int, std::string> exits;
  while (static_cast<int>(exits.size()) < workers) {
    if (int sig = g_python_stop.load()) {
      status = "cancelled";
      error = std::string("stopped by signal ") + sigabbrev_np(sig);
      break;
    }
    for (auto& [r, p] : procs) {
      if (exits.count(r)) continue;
      auto st = p.poll();
      if (!st) continue;
      exits[r] = st->describe();
      events.write(
          {{"event", "worker_exited"}, {"rank", r}, {"pid", p.pid()}, {"status", st->describe()}});
      spdlog::info("rank {} (pid {}) {}", r, p.pid(), st->describe());
      if (!st->ok() && status == "completed") {
        status = "failed";
        error = "rank " + std::to_string(r) + " " + st->describe();
      }
    }
    if (status != "completed") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (auto& [r, p] : procs) {
    if (exits.count(r)) continue;
    exits[r] = p.terminate(std::chrono::seconds(5)).describe();
    events.write({{"event", "worker_stopped"}, {"rank", r}, {"status", exits[r]}});
  }
  const double wall = std::chrono::duration<double>(Clock::now() - started).count();
  json summary = {{"status", status},
                  {"script", script.string()},
                  {"world_size", workers},
                  {"wall_seconds", wall},
                  {"exits", json::object()}};
  for (auto& [r, e] : exits) summary["exits"][std::to_string(r)] = e;
  if (!error.empty()) summary["error"] = error;
  write_file_atomically(run_dir / "summary.json", summary.dump(2) + "\n");
  events.write({{"event", "job_finished"}, {"status", status}, {"error", error}});
  if (status == "failed") {
    const int r = std::stoi(error.substr(5));
    std::fprintf(stderr, "cohort: %s; the end of its log (%s):\n%s\n", error.c_str(),
                 (run_dir / "logs" / ("rank-" + std::to_string(r) + ".log")).c_str(),
                 tail_of_file(run_dir / "logs" / ("rank-" + std::to_string(r) + ".log")).c_str());
    return 1;
  }
  std::printf("cohort: %s in %s, logs in %s\n", status.c_str(), format_duration(wall).c_str(),
              (run_dir / "logs").c_str());
  return status == "completed" ? 0 : 130;
}

}  // namespace cohort::cli
