// `cohort run [options] train.py [the script's arguments]`: a job whose workers are that script,
// as a job file's `program:` makes one, run like every job (run.cc): a run directory with every
// rank's log, events.jsonl, metrics.jsonl and summary.json, the console, `cohort status`, hang
// reports, Ctrl-C stopping every worker, no worker outliving the launcher.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <set>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "cohort/base/error.h"
#include "cohort/cli/args.h"
#include "cohort/cli/python_launch.h"
#include "cohort/cli/run_job.h"

namespace fs = std::filesystem;

namespace cohort::cli {

struct TorchRendezvous::Impl {
  c10::intrusive_ptr<c10d::TCPStore> store;
};

TorchRendezvous::TorchRendezvous(const std::string& host, uint16_t port, int workers)
    : impl_(std::make_unique<Impl>()) {
  c10d::TCPStoreOptions options;
  options.port = port;
  options.isServer = true;
  options.waitWorkers = false;
  options.numWorkers = static_cast<size_t>(workers);
  impl_->store = c10::make_intrusive<c10d::TCPStore>(host, options);
}

TorchRendezvous::~TorchRendezvous() = default;

uint16_t TorchRendezvous::port() const {
  return impl_->store->getPort();
}

elastic::SpawnOptions python_worker_process(const train::JobConfig& cfg, const PythonWorker& w) {
  std::vector<std::string> args = {"-u", fs::absolute(cfg.program.python).string()};
  args.insert(args.end(), cfg.program.args.begin(), cfg.program.args.end());
  // torchrun's ranks are in [0, WORLD_SIZE): a replacement gets the slot of the worker it
  // replaces; Cohort's own rank in the job is COHORT_JOB_RANK.
  const std::string rank = std::to_string(w.slot), world = std::to_string(w.world_size);
  const std::string threads = std::to_string(cfg.threads_per_worker);
  return {
      .executable = cfg.program.interpreter,
      .args = std::move(args),
      .env = {{"RANK", rank},
              {"LOCAL_RANK", rank},
              {"GROUP_RANK", "0"},
              {"ROLE_RANK", rank},
              {"WORLD_SIZE", world},
              {"LOCAL_WORLD_SIZE", world},
              {"ROLE_WORLD_SIZE", world},
              {"MASTER_ADDR", w.master_addr},
              {"MASTER_PORT", std::to_string(w.master_port)},
              {"TORCHELASTIC_USE_AGENT_STORE", "True"},
              // What torchrun's workers also see (env:// reads the restart count).
              {"TORCHELASTIC_RESTART_COUNT", std::to_string(w.restarts)},
              {"TORCHELASTIC_MAX_RESTARTS", std::to_string(cfg.elastic.max_restarts)},
              {"TORCHELASTIC_RUN_ID", fs::path(w.run_dir).filename().string()},
              {"GROUP_WORLD_SIZE", "1"},
              {"ROLE_NAME", "default"},
              {"COHORT_JOIN", w.coordinator},
              {"COHORT_JOB_RANK", std::to_string(w.rank)},
              {"COHORT_TOKEN", w.token},
              {"COHORT_RUN_DIR", w.run_dir},
              {"OMP_NUM_THREADS", threads},
              {"OPENBLAS_NUM_THREADS", threads}},
      .stdout_path = w.log,
      .stderr_path = w.log,
  };
}

namespace {

int python_usage(std::ostream& os, int code) {
  os << "usage: cohort run [options] SCRIPT.py [the script's arguments...]\n"
        "options: --workers N           worker processes (1)\n"
        "         --python PATH         the interpreter (/usr/bin/python3)\n"
        "         --threads-per-worker T  OMP_NUM_THREADS of each (CPUs / workers, at least 1)\n"
        "         --bind-to auto|none   auto: each worker runs on its own share of the CPUs\n"
        "                               while workers <= CPUs, as mpirun binds its ranks\n"
        "         --set key=value       any other key of a job file (docs/job-config.md), e.g.\n"
        "                               dashboard.enabled=true, comm.timeout_s=60\n"
        "         --run-dir DIR         the run directory (runs/<script>-<time>)\n"
        "         --bind HOST --port P  where the coordinator listens (127.0.0.1, any port)\n"
        "         --token-file F        the job token (COHORT_TOKEN of every worker)\n\n"
        "Everything after the script is the script's. Each worker gets torchrun's variables\n"
        "(RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), so\n"
        "init_process_group(\"cohort\") (after `import cohort`) or any other backend finds its\n"
        "peers; `import cohort` also makes it a worker of the job (docs/python.md).\n";
  return code;
}

// A job name from the script's: what a job file's `name:` allows.
std::string job_name_of(const fs::path& script) {
  std::string name = script.stem().string();
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  }
  if (name.empty()) name = "python";
  return name.substr(0, 64);
}

// The YAML text of a value given on the command line: quoted, so that it stays a string.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

int python_script_at(int argc, char** argv) {
  static const std::set<std::string> kValued = {"set",     "run-dir", "resume",
                                                "bind",    "port",    "token-file",
                                                "workers", "python",  "threads-per-worker",
                                                "bind-to"};
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
  Args args(
      script_at, argv,
      {"workers", "python", "threads-per-worker", "set", "run-dir", "bind", "port", "token-file",
       "bind-to"},
      {"help"});
  if (args.has("help")) return python_usage(std::cout, 0);
  if (!args.positionals().empty()) return python_usage(std::cerr, 2);
  const fs::path script = fs::absolute(argv[script_at]);
  if (!fs::is_regular_file(script)) throw ConfigError("no such script: " + script.string());
  const long workers = args.get_int("workers", 1);
  if (workers < 1) throw ConfigError("--workers must be at least 1");
  const long cpus = static_cast<long>(std::max(1u, std::thread::hardware_concurrency()));

  // The job file this command line stands for; --set may change any of it.
  std::string yaml =
      "name: " + job_name_of(script) + "\nworkers: " + std::to_string(workers) +
      "\nthreads_per_worker: " +
      std::to_string(args.get_int("threads-per-worker", std::max(1L, cpus / workers))) +
      "\nprogram:\n  python: " + quoted(script.string()) +
      "\n  interpreter: " + quoted(args.get_or("python", "/usr/bin/python3")) + "\n  args: [";
  for (int i = script_at + 1; i < argc; ++i) {
    yaml += (i > script_at + 1 ? ", " : "") + quoted(argv[i]);
  }
  yaml += "]\n";
  train::LoadOptions load;
  load.overrides = args.all("set");
  train::JobConfig cfg = train::parse_job_config(yaml, "the command line", load);

  RunSettings settings;
  settings.run_dir = args.get_or("run-dir", "");
  settings.bind = args.get_or("bind", "127.0.0.1");
  settings.port = static_cast<uint16_t>(args.get_int("port", 0));
  settings.token_file = args.get_or("token-file", "");
  settings.bind_to_cpus = bind_to_cpus(args);
  return run_job(cfg, settings);
}

}  // namespace cohort::cli
