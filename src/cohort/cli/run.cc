// `cohort run JOB.yaml`: the launcher. Starts the job's coordinator in this process, spawns one
// `cohort worker` process per worker, shows progress, and writes the run directory:
//   config.yaml      the resolved job file
//   metrics.jsonl    one progress record per logged step
//   events.jsonl     job lifecycle events (start, worker exits, failures, finish)
//   logs/rank-N.log  each worker's own log
//   logs/launcher.log this process's log (coordinator, stragglers, worker exits)
//   steps/rank-N.jsonl where each step of each rank went (trace/step_log.h), for `cohort diagnose`
//   checkpoints/     periodic checkpoints (written by rank 0)
//   summary.json     the outcome
//   hang-report.txt  when a collective timed out or no rank made progress for debug.hang_timeout_s:
//                    every rank's flight recorder and the diagnosis (trace/hang_report.h)
// Ctrl-C (SIGINT) or SIGTERM stops every worker and the job ends as "cancelled". A launcher that is
// killed leaves its local workers training for up to elastic.coordinator_wait_s, and `cohort run
// --resume RUN_DIR` re-adopts them (readopt.h); workers of a Python program, of a job with
// parameter servers, or started through Slurm or mpirun die with it (PR_SET_PDEATHSIG).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "cohort/base/checksum.h"
#include "cohort/base/clock.h"
#include "cohort/base/error.h"
#include "cohort/base/file.h"
#include "cohort/base/host.h"
#include "cohort/base/log.h"
#include "cohort/base/secret.h"
#include "cohort/cli/args.h"
#include "cohort/cli/commands.h"
#include "cohort/cli/job_files.h"
#include "cohort/cli/ps_fleet.h"
#include "cohort/cli/python_launch.h"
#include "cohort/cli/readopt.h"
#include "cohort/cli/run_job.h"
#include "cohort/cli/run_report.h"
#include "cohort/elastic/coordinator.h"
#include "cohort/elastic/job_protocol.h"
#include "cohort/elastic/process.h"
#include "cohort/monitor/live_console.h"
#include "cohort/store/connect.h"
#include "cohort/store/etcd_store.h"
#include "cohort/trace/hang_report.h"
#include "cohort/trace/straggler.h"
#include "cohort/train/config.h"
#include "cohort/train/worker.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace cohort::cli {
namespace {

std::atomic<int> g_stop_signal{0};
// Written (a byte) when a child process ends or a stop signal arrives: the launcher's loop wakes
// at once instead of at its next tick, so that a lost worker's survivors re-form without waiting.
int g_wake_pipe[2] = {-1, -1};

void wake_loop() {
  const char b = 0;
  [[maybe_unused]] auto n = ::write(g_wake_pipe[1], &b, 1);
}

void on_stop_signal(int sig) {
  g_stop_signal = sig;
  wake_loop();
}

void on_child_exit(int) {
  const int saved = errno;
  wake_loop();
  errno = saved;
}

// Sleeps until `timeout` passes or wake_loop() is called, then drains the wake-ups.
void wait_for_event(std::chrono::milliseconds timeout) {
  pollfd p{g_wake_pipe[0], POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(timeout.count())) > 0) {
    char buf[64];
    while (::read(g_wake_pipe[0], buf, sizeof(buf)) > 0) {
    }
  }
}

std::string timestamp_for_dir() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", &tm);
  return buf;
}

// The web console of the job (dashboard: in the job file). Its URL goes to the terminal, to
// <run_dir>/console.url and to events.jsonl.
std::unique_ptr<monitor::LiveConsole> start_console(const train::JobConfig& cfg,
                                                    const std::string& store,
                                                    const std::string& token,
                                                    const fs::path& run_dir, EventLog& events) {
  auto console = std::make_unique<monitor::LiveConsole>(monitor::LiveConsoleOptions{
      .bind_host = cfg.dashboard.bind,
      .port = static_cast<uint16_t>(cfg.dashboard.port),
      .store = store,
      .token = token,
      .job = {.name = cfg.name,
              .world_size = static_cast<int>(cfg.workers),
              .config_yaml = train::to_yaml(cfg),
              .run_dir = fs::absolute(run_dir).string(),
              .started = wall_seconds()},
  });
  monitor::JobMonitor& m = console->monitor();
  events.set_listener([&m](const json& e) { m.add_event(e); });
  write_file_atomically(run_dir / "console.url", console->url() + "\n");
  events.write({{"event", "console_started"}, {"url", console->url()}});
  std::printf("cohort: console at %s\n", console->url().c_str());
  std::fflush(stdout);
  return console;
}

// `cohort run ... --launcher slurm` outside an allocation: the same command as a batch job, in a
// run directory fixed now so that the user knows where to look.
int submit_to_slurm(int argc, char** argv, const RunSettings& settings,
                    const train::JobConfig& cfg) {
  std::vector<std::string> args = {elastic::self_executable()};
  bool has_run_dir = false;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    // The batch job runs in the allocation: not submitted again, nor given sbatch's options.
    if (a == "--launcher" || a == "--launcher-arg") {
      ++i;
      continue;
    }
    if (a.rfind("--launcher=", 0) == 0 || a.rfind("--launcher-arg=", 0) == 0) continue;
    has_run_dir |= a == "--run-dir" || a.rfind("--run-dir=", 0) == 0 || a == "--resume";
    args.push_back(a);
  }
  fs::path run_dir = fs::absolute(!settings.resume_dir.empty() ? fs::path(settings.resume_dir)
                                  : !settings.run_dir.empty()
                                      ? fs::path(settings.run_dir)
                                      : fs::path("runs") / (cfg.name + "-" + timestamp_for_dir()));
  if (!has_run_dir) args.insert(args.end(), {"--run-dir", run_dir.string()});
  fs::create_directories(run_dir);
  auto cmd = sbatch_command(cfg.name, cfg.workers, cfg.threads_per_worker,
                            (run_dir / "slurm-%j.out").string(), settings.launcher_args, args);
  elastic::ChildProcess sbatch =
      elastic::ChildProcess::spawn({.executable = cmd[0],
                                    .args = {cmd.begin() + 1, cmd.end()},
                                    .stdout_path = (run_dir / "sbatch.out").string(),
                                    .stderr_path = (run_dir / "sbatch.out").string()});
  std::optional<elastic::ExitStatus> st = sbatch.wait_for(std::chrono::seconds(60));
  if (!st) st = sbatch.terminate(std::chrono::seconds(1));
  const std::string said = read_file(run_dir / "sbatch.out");
  if (!st->ok()) throw Error("sbatch " + st->describe() + ": " + said);
  std::printf("cohort: submitted Slurm job %s; run directory %s\n",
              said.substr(0, said.find_first_of("\n;")).c_str(), run_dir.c_str());
  return 0;
}

// A standby started beside its job (a Kubernetes pod, --run-id) waits for the job to start before
// it campaigns: leading a job nobody has published would be leading nothing. etcd out of reach
// for a while (starting too) is ridden out.
// Whether the job started within `limit` seconds (negative: no limit).
bool wait_for_job(store::EtcdStore& job, const std::string& where, long limit) {
  const auto deadline = Clock::now() + std::chrono::seconds(std::max(limit, 0L));
  bool said = false;
  for (;;) {
    try {
      if (job.check({elastic::keys::kConfig})) return true;
      if (limit >= 0 && Clock::now() >= deadline) return false;
      if (!said) {
        std::printf("cohort: standby: waiting for the job at %s to start\n", where.c_str());
        std::fflush(stdout);
        said = true;
      }
      job.wait({elastic::keys::kConfig},
               limit >= 0 ? std::max(std::chrono::duration_cast<Millis>(deadline - Clock::now()),
                                     Millis(1))
                          : Millis(60000));
      return true;
    } catch (const TimeoutError&) {
    } catch (const Error& e) {
      spdlog::warn("standby: {} (trying again)", e.what());
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }
}

int usage(std::ostream& os, int code) {
  os << "usage: cohort run JOB.yaml [--set key=value]... [--run-dir DIR]\n"
        "       cohort run --resume RUN_DIR [--set key=value]...\n"
        "       cohort run [--workers N] SCRIPT.py [args...]   (cohort run --help SCRIPT.py)\n"
        "       cohort run --standby etcd://HOST:PORT/PREFIX/RUN [--run-dir DIR]\n"
        "options: --bind HOST --port P        where the coordinator listens (127.0.0.1, any port)\n"
        "         --external-workers          start no workers: they are started elsewhere with\n"
        "                                     `cohort worker --join HOST:PORT` (mpirun, srun, "
        "...)\n"
        "         --token-file F              the job token: read from F, or written to F (mode\n"
        "                                     0600) if F does not exist\n"
        "         --launcher local|slurm|mpirun  what starts the workers: child processes here\n"
        "                                     (local), a job step each in this Slurm allocation\n"
        "                                     (slurm; outside one, the job is submitted with\n"
        "                                     sbatch), or one mpirun (mpirun); docs/clusters.md\n"
        "         --launcher-arg ARG          an option for mpirun or sbatch (repeat it:\n"
        "                                     --launcher-arg --hostfile --launcher-arg hosts)\n"
        "         --resume RUN_DIR            go on with the job of RUN_DIR: re-adopt its workers\n"
        "                                     that still run, or else restart from its newest\n"
        "                                     checkpoint\n"
        "         --run-id ID                 with coordinator.store: the job's keys go under\n"
        "                                     PREFIX/ID (workers join etcd://.../PREFIX/ID)\n"
        "         --standby ADDRESS           a standby coordinator of the job whose store is at\n"
        "                                     ADDRESS (coordinator.store; what the workers join):\n"
        "                                     takes the job over when its coordinator is gone\n"
        "         --standby-wait S            how long a standby waits for its job to start, in\n"
        "                                     seconds (default: as long as it takes)\n\n"
        "Runs a training job: a coordinator in this process and one worker process per worker.\n"
        "Ctrl-C stops the job cleanly.\n";
  return code;
}

}  // namespace

int run_main(int argc, char** argv) {
  if (python_script_at(argc, argv) > 0) return run_python_main(argc, argv);
  Args args(argc, argv,
            {"set", "run-dir", "resume", "bind", "port", "token-file", "launcher", "launcher-arg",
             "standby", "standby-wait", "run-id"},
            {"help", "external-workers"});
  if (args.has("help")) return usage(std::cout, 0);
  RunSettings settings;
  settings.resume_dir = args.get_or("resume", "");
  settings.standby = args.get_or("standby", "");
  if (args.positionals().size() !=
      (settings.resume_dir.empty() && settings.standby.empty() ? 1u : 0u)) {
    return usage(std::cerr, 2);
  }
  settings.external = args.has("external-workers");
  settings.run_dir = args.get_or("run-dir", "");
  settings.launcher = parse_launcher(args.get_or("launcher", "local"));
  settings.launcher_args = args.all("launcher-arg");
  // Workers on other nodes reach a coordinator that listens on every address.
  settings.bind =
      args.get_or("bind", settings.launcher == LauncherKind::Local ? "127.0.0.1" : "0.0.0.0");
  settings.port = static_cast<uint16_t>(args.get_int("port", 0));
  settings.token_file = args.get_or("token-file", "");
  settings.run_id = args.get_or("run-id", "");
  if (!settings.run_id.empty() &&
      (settings.run_id.size() > 100 ||
       settings.run_id.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                         "0123456789._-") != std::string::npos)) {
    throw ConfigError("--run-id: '" + settings.run_id +
                      "' is not a run id (letters, digits, '.', '_' and '-', at most 100)");
  }

  if (!settings.standby.empty()) {
    // The job as its coordinator published it; the workers are its, started elsewhere.
    if (!store::is_etcd(settings.standby))
      throw ConfigError("--standby: " + settings.standby + " is not an etcd address");
    store::EtcdStore job(store::EtcdAddress::parse(settings.standby));
    if (!wait_for_job(job, settings.standby, args.get_int("standby-wait", -1))) {
      std::printf("cohort: standby: no job at %s: nothing to take over\n",
                  settings.standby.c_str());
      return 0;
    }
    settings.external = true;
    return run_job(
        train::parse_job_config(store::to_string(job.get(elastic::keys::kConfig)),
                                "job config from " + settings.standby, {.check_paths = false}),
        settings);
  }
  // Resolve the job: from the job file, or from the run directory being resumed.
  std::string job_path = settings.resume_dir.empty()
                             ? args.positionals()[0]
                             : (fs::path(settings.resume_dir) / "config.yaml").string();
  train::LoadOptions load_options;
  load_options.overrides = args.all("set");
  const bool submit = settings.launcher == LauncherKind::Slurm && !std::getenv("SLURM_JOB_ID");
  load_options.check_paths = !submit;  // the allocation's nodes check the data set
  const train::JobConfig cfg = train::load_job_config(job_path, load_options);
  if (submit) return submit_to_slurm(argc, argv, settings, cfg);
  return run_job(cfg, settings);
}

int run_job(const train::JobConfig& cfg, const RunSettings& settings) {
  const LauncherKind launcher = settings.launcher;
  // Under mpirun the workers are one process of this launcher's, not one each: it tracks them
  // through the coordinator, as workers started elsewhere.
  bool external = settings.external || launcher == LauncherKind::Mpirun;
  const std::string& resume_dir = settings.resume_dir;
  const bool python = !cfg.program.python.empty();
  if (python && external) {
    throw ConfigError(
        "--external-workers: the workers of a Python program are started by this launcher");
  }
  if (python && launcher != LauncherKind::Local) {
    throw ConfigError("--launcher: a Python program's workers are started by this launcher");
  }
  const std::optional<SlurmAllocation> slurm =
      launcher == LauncherKind::Slurm ? std::optional(SlurmAllocation::current()) : std::nullopt;
  fs::path run_dir = !resume_dir.empty() ? fs::path(resume_dir)
                     : !settings.run_dir.empty()
                         ? fs::path(settings.run_dir)
                         : fs::path("runs") / (cfg.name + "-" + timestamp_for_dir());
  fs::create_directories(run_dir / "logs");
  fs::create_directories(run_dir / "checkpoints");
  write_file_atomically(run_dir / "config.yaml", train::to_yaml(cfg));
  EventLog events(run_dir / "events.jsonl");
  log::add_file((run_dir / "logs" / "launcher.log").string());
  spdlog::info("job '{}': {} workers, run directory {}", cfg.name, cfg.workers, run_dir.string());

  auto ms = [](double sec) { return std::chrono::milliseconds(static_cast<long>(sec * 1000)); };
  // An etcd-kept job's keys go under PREFIX/<run directory>-<start time>: a resumed run is a
  // new job there, and jobs never share keys.
  if (!settings.run_id.empty() && cfg.coordinator.store.empty())
    throw ConfigError("--run-id: only for a job whose coordinator.store is etcd");
  const std::string job_store =
      !settings.standby.empty() ? settings.standby
      : cfg.coordinator.store.empty()
          ? ""
          : cfg.coordinator.store + "/" +
                (settings.run_id.empty()
                     ? run_dir.filename().string() + "-" + timestamp_for_dir()
                     : settings.run_id);
  // Local workers with the embedded store outlive this process (readopt.h): its store keeps a
  // journal, and a coordinator started again with --resume re-adopts them.
  const bool readoptable = job_store.empty() && launcher == LauncherKind::Local && !python &&
                           !cfg.sync.uses_servers();
  std::optional<CoordinatorRecord> previous;
  if (!resume_dir.empty() && readoptable) previous = orphaned_job(run_dir);
  // The token of a job whose coordinator may start again is kept in the run directory (0600),
  // unless --token-file names its file; removed with the journal when the job ends.
  const std::string run_token = (fs::absolute(run_dir) / "token").string();
  std::string token_file = previous ? previous->token_file : settings.token_file;
  if (readoptable && token_file.empty()) token_file = run_token;
  const bool own_token_file = readoptable && token_file == run_token;
  std::string token = job_token(token_file);

  auto make_coordinator = [&](bool readopt) {
    return std::make_unique<elastic::Coordinator>(elastic::CoordinatorOptions{
        .store = job_store,
        .standby = !settings.standby.empty(),
        .bind_host = readopt ? previous->bind : settings.bind,
        .port = readopt ? previous->port : settings.port,
        .token = token,
        .world_size = static_cast<int>(cfg.workers),
        .rank_limit = static_cast<int>(cfg.workers + cfg.elastic.max_restarts),
        .config_yaml = train::to_yaml(cfg),
        .run_dir = fs::absolute(run_dir).string(),
        .resume_from = resume_dir.empty() ? "" : fs::absolute(run_dir / "checkpoints").string(),
        .membership = {.min_workers = static_cast<int>(cfg.elastic.min_or(cfg.workers)),
                       .max_workers = static_cast<int>(cfg.elastic.max_or(cfg.workers)),
                       .failure_timeout = ms(cfg.elastic.failure_timeout_s),
                       .join_timeout = ms(cfg.elastic.join_timeout_s),
                       .heartbeat = ms(cfg.elastic.heartbeat_s)},
        .journal = readoptable ? journal_path(fs::absolute(run_dir)).string() : "",
        .readopt = readopt,
        .predecessor = readopt ? previous->describe() : "",
    });
  };
  std::unique_ptr<elastic::Coordinator> coordinator_ptr = make_coordinator(previous.has_value());
  if (previous &&
      (coordinator_ptr->job_ended() ||
       !workers_still_run(*coordinator_ptr,
                          ms(cfg.elastic.failure_timeout_s + 2 * cfg.elastic.heartbeat_s)))) {
    std::printf("cohort: no worker of the job answered its new coordinator: resuming from the "
                "checkpoints\n");
    spdlog::info("no worker of the job (coordinator {}) answered: resuming from the checkpoints",
                 previous->describe());
    coordinator_ptr.reset();
    previous.reset();
    coordinator_ptr = make_coordinator(false);
  }
  elastic::Coordinator& coordinator = *coordinator_ptr;
  // Workers a predecessor started are this coordinator's to watch, not to start or replace.
  if (previous) external = true;
  if (readoptable) {
    CoordinatorRecord{.host = host_name(),
                      .pid = ::getpid(),
                      .bind = previous ? previous->bind : settings.bind,
                      .port = coordinator.endpoint().port,
                      .token_file = token_file}
        .write(run_dir);
  }
  // The launcher's workers reach the coordinator where it listens (loopback when it listens on
  // every address); on a Slurm allocation, at this node's address.
  const std::string local_join = coordinator.join_address("127.0.0.1");
  const std::string join =
      coordinator.join_address(slurm ? slurm->this_node_address() : std::string("127.0.0.1"));
  if (coordinator.job_ended()) {
    std::printf("cohort: the job at %s ended before this standby took it over\n", join.c_str());
    return 0;
  }
  if (!coordinator.took_over_from().empty()) {
    events.write({{"event", "coordinator_took_over"},
                  {"from", coordinator.took_over_from()},
                  {"readopted", previous.has_value()}});
    std::printf("cohort: took over the job at %s from its coordinator (%s)%s\n", join.c_str(),
                coordinator.took_over_from().c_str(),
                previous ? ", with the workers that still run" : "");
  }
  std::unique_ptr<monitor::LiveConsole> console;
  if (cfg.dashboard.enabled) console = start_console(cfg, local_join, token, run_dir, events);
  events.write({{"event", resume_dir.empty() ? "job_started" : "job_resumed"},
                {"workers", cfg.workers},
                {"coordinator", join}});
  std::printf("cohort: job '%s' with %ld workers, run directory %s\n", cfg.name.c_str(),
              static_cast<long>(cfg.workers), run_dir.c_str());
  std::fflush(stdout);

  if (g_wake_pipe[0] < 0 && ::pipe2(g_wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    throw SystemError("pipe", errno);
  }
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  struct sigaction child {};
  child.sa_handler = on_child_exit;
  child.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigemptyset(&child.sa_mask);
  sigaction(SIGCHLD, &child, nullptr);

  auto start = Clock::now();
  std::string self = elastic::self_executable();
  // Worker processes by rank in the job: 0 .. workers-1, then replacements workers, workers+1, ...
  std::map<int, elastic::ChildProcess> workers;
  std::set<int> exited;
  int next_rank = static_cast<int>(cfg.workers);
  int restarts = 0;
  if (settings.external) {
    std::printf(
        "cohort: waiting for %ld workers: cohort worker --join %s --token-file %s\n",
        static_cast<long>(cfg.workers), join.c_str(),
        (settings.token_file.empty() ? "<file with the job token>" : settings.token_file.c_str()));
    std::fflush(stdout);
  }
  const std::string local_host =
      store::is_etcd(local_join) ? "127.0.0.1" : net::Endpoint::parse(local_join).host;
  const WorkerCommand command{
      .executable = self, .join = join, .token = token, .threads = cfg.threads_per_worker};
  // Local workers and servers are forked by a spawner that has libtorch loaded already.
  ProcessStarter starter(command, !python && launcher == LauncherKind::Local && !external);
  // sync.mode ssp and async: the parameter servers, before the workers that need them.
  std::unique_ptr<store::Store> ps_store;
  std::unique_ptr<ServerFleet> servers;
  if (cfg.sync.uses_servers()) {
    ps_store = store::connect(local_join, {.token = token});
    servers = std::make_unique<ServerFleet>(cfg, *ps_store, command, starter,
                                            (run_dir / "logs").string(), external, events);
    servers->start();
    for (int i = 0; external && i < cfg.parameter_servers; ++i) {
      std::printf("cohort: and server %d: %s\n", i,
                  servers->external_command(i, settings.token_file).c_str());
    }
  }
  // A Python program's env:// rendezvous (torch.distributed's own store).
  std::unique_ptr<TorchRendezvous> rendezvous;
  if (python) rendezvous = std::make_unique<TorchRendezvous>(local_host, 0, cfg.workers);
  auto spawn = [&](int r) {
    std::string log = (run_dir / "logs" / ("rank-" + std::to_string(r) + ".log")).string();
    WorkerCommand w = command;
    w.log = log;
    elastic::SpawnOptions how =
        python  ? python_worker_process(cfg, {.rank = r,
                                              .world_size = static_cast<int>(cfg.workers),
                                              .coordinator = local_join,
                                              .master_addr = local_host,
                                              .master_port = rendezvous->port(),
                                              .token = token,
                                              .run_dir = fs::absolute(run_dir).string(),
                                              .log = log})
        : slurm ? slurm_worker(*slurm, w, r)
                : local_worker(w, r);
    // With the store in etcd the workers outlive this process: a standby takes them over; with
    // the embedded store, a coordinator started again with --resume (readopt.h).
    how.die_with_parent = !store::is_etcd(join) && !readoptable;
    auto child = starter.start(how);
    coordinator.worker_started(r, child.pid());
    pid_t pid = child.pid();
    workers.emplace(r, std::move(child));
    return pid;
  };
  for (int r = 0; r < (external ? 0 : cfg.workers); ++r) {
    pid_t pid = spawn(r);
    events.write({{"event", "worker_started"}, {"rank", r}, {"pid", pid}});
  }
  // --launcher mpirun: every worker under one mpirun, which ends once they all have.
  std::optional<elastic::ChildProcess> group;
  if (launcher == LauncherKind::Mpirun) {
    WorkerCommand w = command;
    w.log = (run_dir / "logs" / "mpirun.log").string();
    elastic::SpawnOptions how = mpirun_workers(w, cfg.workers, settings.launcher_args);
    how.die_with_parent = !store::is_etcd(join);  // as the local workers, below
    group = elastic::ChildProcess::spawn(how);
    events.write({{"event", "workers_started"}, {"launcher", "mpirun"}, {"pid", group->pid()}});
  }
  // Whether a worker may still join: restarts left, or a replacement not yet admitted. Workers
  // started elsewhere (--external-workers) are never replaced by this launcher.
  auto joiners_possible = [&] {
    if (external) return false;
    if (restarts < cfg.elastic.max_restarts) return true;
    for (auto& [r, w] : workers) {
      const auto& m = coordinator.members();
      if (r >= cfg.workers && !exited.count(r) && !coordinator.is_lost(r) &&
          std::find(m.begin(), m.end(), r) == m.end()) {
        return true;
      }
    }
    return false;
  };

  // A job bound to one interface has no store on 127.0.0.1.
  auto debug_store = store::connect(local_join, {.token = token});
  trace::HangWatch hang_watch(*debug_store, elastic::keys::kDebugPrefix,
                              static_cast<int>(cfg.workers), cfg.debug.hang_timeout_s);
  auto next_hang_check = Clock::now(), next_straggler_check = Clock::now();
  std::ofstream metrics(run_dir / "metrics.jsonl", std::ios::app);
  ProgressPrinter progress;
  trace::StragglerWatch stragglers(
      {.margin = cfg.debug.straggler_margin, .window = cfg.debug.straggler_window});
  // Reads each member's live status (its recent busy times) and reports new stragglers.
  auto check_stragglers = [&] {
    const auto& members = coordinator.members();
    for (int r = 0; r < next_rank; ++r) {
      if (std::find(members.begin(), members.end(), r) == members.end()) {
        stragglers.forget(r);
        continue;
      }
      const std::string key = elastic::keys::status(r);
      if (!debug_store->check({key})) continue;
      try {
        json st = json::parse(store::to_string(debug_store->get(key)));
        if (!st.contains("busy")) continue;
        std::vector<double> busy;
        for (int64_t us : st["busy"].value("us", std::vector<int64_t>{})) busy.push_back(us / 1e6);
        stragglers.observe(r, st["busy"].value("first_step", int64_t{0}), busy);
      } catch (const json::exception&) {
        // A record from a worker of another version: not ours to judge.
      }
    }
    for (const trace::Straggler& s : stragglers.poll()) {
      json e = s.to_json();
      e["event"] = "straggler";
      e["margin"] = cfg.debug.straggler_margin;
      events.write(e);
      spdlog::warn("{}", s.describe());
      progress.end_line();
      std::printf("cohort: %s\n", s.describe().c_str());
      std::fflush(stdout);
    }
  };

  std::string status = "completed", error;
  std::map<int, bool> exit_ok;  // by rank, once its process exited
  auto all_members_succeeded = [&] {
    for (int r : coordinator.members()) {
      if (!exit_ok.count(r) || !exit_ok[r]) return false;
    }
    return true;
  };
  std::vector<std::string> losses;  // "rank R (host, pid P): cause", in order
  for (;;) {
    if (!coordinator.leads()) {
      status = "failed";
      error =
          "this coordinator lost the lead of the job (its etcd lease expired); a standby that "
          "takes it over goes on with the workers";
      for (auto& [r, w] : workers) w.release();
      if (group) group->release();
      break;
    }
    for (auto& m : coordinator.poll_metrics()) {
      metrics << m.dump() << "\n";
      metrics.flush();
      progress.record(m);
      if (console) console->monitor().add_metric(m);
    }
    if (int sig = g_stop_signal.load()) {
      status = "cancelled";
      error = std::string("stopped by signal ") + sigabbrev_np(sig);
      break;
    }
    for (auto& e : coordinator.poll_worker_events()) {
      if (e.value("event", "") == "resumed_from_checkpoint") {
        progress.end_line();
        auto skipped = e.value("skipped", json::array());
        std::printf("cohort: resuming from %s (step %ld)\n",
                    e.value("path", std::string("?")).c_str(), e.value("step", 0L));
        for (const auto& why : skipped) {
          std::printf("cohort: skipped a checkpoint that does not verify: %s\n",
                      why.get<std::string>().c_str());
        }
        std::fflush(stdout);
      }
      events.write(e);
    }
    // A worker's own fatal error (bad data, a bug) ends the job: restarting would repeat it.
    if (auto reported = coordinator.failure()) {
      status = "failed";
      error = "rank " + std::to_string(reported->first) + ": " + reported->second;
      if (cfg.workers > 1 &&
          (hang_watch.timeout_reported() || error.find("timed out") != std::string::npos)) {
        report_hang(hang_watch, workers, run_dir, events, "a collective timed out: " + error);
      }
      break;
    }
    for (auto& [r, w] : workers) {
      auto st = w.poll();
      if (!st || exited.count(r)) continue;
      exited.insert(r);
      exit_ok[r] = st->ok();
      spdlog::info("rank {} (pid {}) exited: {}", r, w.pid(), st->describe());
      events.write({{"event", "worker_exited"},
                    {"rank", r},
                    {"pid", w.pid()},
                    {"status", st->describe()},
                    {"excluded", st->code == train::kExitExcluded && st->signal == 0}});
      coordinator.worker_exited(r, st->ok(), st->describe());
      if (console) console->monitor().worker_exited(r, st->describe(), st->ok());
    }
    coordinator.expect_joiners(joiners_possible());
    for (auto& e : coordinator.tick()) {
      if (e.value("event", "") == "worker_lost") {
        char line[512];
        std::snprintf(line, sizeof(line), "rank %d (host %s, pid %ld): %s", e.value("rank", -1),
                      e.value("host", std::string("?")).c_str(), e.value("pid", 0L),
                      e.value("cause", std::string("?")).c_str());
        losses.push_back(line);
        progress.end_line();
        std::printf("cohort: lost %s\n", line);
      } else if (e.value("event", "") == "membership_changed") {
        progress.end_line();
        std::printf("cohort: membership epoch %d: %zu workers\n", e.value("epoch", 0),
                    e.value("members", json::array()).size());
      }
      std::fflush(stdout);
      events.write(e);
    }
    for (int lost : coordinator.take_lost()) {
      if (external || restarts >= cfg.elastic.max_restarts) continue;
      ++restarts;
      int r = next_rank++;
      pid_t pid = spawn(r);
      events.write({{"event", "worker_started"}, {"rank", r}, {"pid", pid}, {"replaces", lost}});
      if (console) console->monitor().add_worker(r, lost);
    }
    coordinator.expect_joiners(joiners_possible());
    if (servers) {
      if (auto why = servers->tick()) {
        status = "failed";
        error = *why;
        break;
      }
      if (!joiners_possible() && !coordinator.changing()) {
        servers->retire_orphans(coordinator.members());
      }
      if (console) console->monitor().set_servers(servers->rows());
    }
    if (group && group->poll() && !coordinator.summaries()) {
      status = "failed";
      error = "mpirun " + group->poll()->describe() +
              " before the job completed (its output: logs/mpirun.log)";
      break;
    }
    if (auto why = coordinator.abandoned()) {
      status = "failed";
      error = (losses.empty() ? "" : "lost " + losses.back() + "; ") + *why;
      // A worker declared lost whose process is still there is stuck (hung, stopped): say where.
      bool lost_but_alive = false;
      for (auto& [r, w] : workers) lost_but_alive |= coordinator.is_lost(r) && !w.poll();
      if (cfg.workers > 1 && (lost_but_alive || hang_watch.timeout_reported() ||
                              error.find("timed out") != std::string::npos)) {
        report_hang(hang_watch, workers, run_dir, events, "a collective timed out: " + error);
      }
      break;
    }
    // A Python program's workers are done when their processes are: one that posted its summary
    // may still be running the end of its script. A replacement still waiting to be admitted
    // then comes too late (it is stopped).
    if (!python && coordinator.summaries()) break;
    if (python && !coordinator.members().empty() && all_members_succeeded()) break;
    if (!external && exited.size() == workers.size()) {
      status = "failed";
      error = (python ? "every worker exited" : "every worker exited without a final summary") +
              (losses.empty() ? std::string() : " (lost " + losses.back() + ")");
      break;
    }
    // Faster than the workers publish (twice a second), so that no record is missed.
    if (cfg.workers > 1 && Clock::now() >= next_straggler_check) {
      next_straggler_check = Clock::now() + std::chrono::milliseconds(250);
      check_stragglers();
    }
    if (Clock::now() >= next_hang_check) {
      next_hang_check = Clock::now() + std::chrono::seconds(1);
      if (hang_watch.stalled()) {
        progress.end_line();
        report_hang(hang_watch, workers, run_dir, events,
                    "no rank made progress for " +
                        std::to_string(static_cast<long>(cfg.debug.hang_timeout_s)) + " s");
      }
    }
    // While the membership changes, the survivors' ready reports come within milliseconds: look
    // for them that often. Otherwise the next tick, or at once when a worker ends.
    wait_for_event(std::chrono::milliseconds(coordinator.changing() ? 2 : 50));
  }
  // Workers that still run (started elsewhere, or by a predecessor) leave when told.
  coordinator.end_job(status);
  // The last statuses: a short job may end before the once-a-second check saw a full window.
  if (cfg.workers > 1) check_stragglers();
  for (auto& m : coordinator.poll_metrics()) {
    metrics << m.dump() << "\n";
    progress.record(m);
    if (console) console->monitor().add_metric(m);
  }
  progress.end_line();
  json exits = json::object();  // how each worker process ended, by rank
  if (group) exits["mpirun"] = group->terminate(std::chrono::seconds(5)).describe();
  for (auto& [r, w] : workers) {
    // A worker the job went on without may be stopped: SIGTERM would wait for it to be resumed.
    if (coordinator.is_lost(r)) w.signal(SIGKILL);
    exits[std::to_string(r)] = w.terminate(std::chrono::seconds(5)).describe();
  }
  if (servers) servers->stop();
  double wall = std::chrono::duration<double>(Clock::now() - start).count();

  json summary;
  auto per_rank = coordinator.summaries();
  if (status == "completed" && !per_rank && !python) {
    status = "failed";
    error = "workers exited without reporting a summary";
  }
  if (per_rank && python) {
    summary = python_summary(*per_rank, cfg, wall);
  } else if (per_rank) {
    summary = aggregate_summary(*per_rank, cfg, wall);
  } else {
    summary = {{"name", cfg.name}, {"world_size", cfg.workers}, {"wall_seconds", wall}};
  }
  const auto& rs = coordinator.recovery_stats();
  summary["recoveries"] = rs.recoveries;
  summary["recovery_seconds_max"] = rs.recovery_seconds_max;
  summary["steps_rolled_back"] = rs.steps_rolled_back;
  summary["final_world_size"] = per_rank ? per_rank->size() : coordinator.members().size();
  summary["workers_lost"] = losses.size();
  summary["restarts"] = restarts;
  summary["membership_epoch"] = coordinator.epoch();
  if (servers) summary["servers"] = servers->summary();
  if (!coordinator.took_over_from().empty()) {
    summary["took_over_from"] = coordinator.took_over_from();
    if (coordinator.takeover_seconds() >= 0)
      summary["coordinator_takeover_seconds"] = coordinator.takeover_seconds();
  }
  summary["exits"] = exits;
  summary["status"] = status;
  if (!error.empty()) summary["error"] = error;
  write_file_atomically(run_dir / "summary.json", summary.dump(2) + "\n");
  events.write({{"event", "job_" + status}, {"error", error}});
  spdlog::info("job {}{}", status, error.empty() ? "" : ": " + error);
  if (console) console->monitor().finish(status, summary);
  coordinator.forget_job();
  if (readoptable) {
    fs::remove(record_path(run_dir));
    if (own_token_file) fs::remove(token_file);
  }

  if (status == "completed") {
    if (python) {
      print_python_report(summary, run_dir.string());
    } else {
      print_report(summary, run_dir.string());
    }
    return 0;
  }
  std::fprintf(stderr, "\ncohort: job %s: %s\n", status.c_str(), error.c_str());
  if (status == "failed") {
    for (auto& [r, w] : workers) {
      auto st = w.poll();
      if (st && !st->ok() && st->signal != SIGTERM && st->signal != SIGKILL) {
        auto log = run_dir / "logs" / ("rank-" + std::to_string(r) + ".log");
        std::fprintf(stderr, "--- last lines of %s ---\n%s\n", log.c_str(), tail_of(log).c_str());
        break;
      }
    }
  }
  return status == "cancelled" ? 130 : 1;
}

}  // namespace cohort::cli
