// run_job.h: the launcher of one job (job_launch.h), in the order a job goes — its run directory
// and its coordinator (re-adopting the workers a predecessor left running, readopt.h), the workers
// and parameter servers, and the loop that supervises them until the job ends. The end (every
// process stopped, summary.json and the report) is run_job_end.cc's.
#include "cohort/cli/run_job.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "cohort/base/clock.h"
#include "cohort/base/cpu_binding.h"
#include "cohort/base/error.h"
#include "cohort/base/file.h"
#include "cohort/base/host.h"
#include "cohort/base/log.h"
#include "cohort/cli/job_files.h"
#include "cohort/cli/job_launch.h"
#include "cohort/cli/ps_fleet.h"
#include "cohort/cli/python_launch.h"
#include "cohort/cli/readopt.h"
#include "cohort/cli/run_report.h"
#include "cohort/cli/stop_signals.h"
#include "cohort/elastic/coordinator.h"
#include "cohort/elastic/job_protocol.h"
#include "cohort/elastic/process.h"
#include "cohort/monitor/live_console.h"
#include "cohort/net/socket.h"
#include "cohort/store/connect.h"
#include "cohort/trace/hang_report.h"
#include "cohort/trace/straggler.h"
#include "cohort/train/worker.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace cohort::cli {
namespace {

std::chrono::milliseconds ms(double sec) {
  return std::chrono::milliseconds(static_cast<long>(sec * 1000));
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

}  // namespace

namespace detail {

JobLaunch::JobLaunch(const train::JobConfig& cfg, const RunSettings& settings)
    : cfg_(cfg),
      settings_(settings),
      python_(!cfg.program.python.empty()),
      external_(settings.external || settings.launcher == LauncherKind::Mpirun),
      stragglers_({.margin = cfg.debug.straggler_margin, .window = cfg.debug.straggler_window}) {
  if (python_ && external_) {
    throw ConfigError(
        "--external-workers: the workers of a Python program are started by this launcher");
  }
  if (python_ && settings.launcher != LauncherKind::Local) {
    throw ConfigError("--launcher: a Python program's workers are started by this launcher");
  }
  if (settings.launcher == LauncherKind::Slurm) slurm_ = SlurmAllocation::current();
  next_rank_ = static_cast<int>(cfg.workers);
}

int JobLaunch::run() {
  open_run_dir();
  start_coordinator();
  if (coordinator_->job_ended()) {
    std::printf("cohort: the job at %s ended before this standby took it over\n", join_.c_str());
    return 0;
  }
  announce();
  try {
    start_workers();
    while (supervise_once()) {
      // While the membership changes, the survivors' ready reports come within milliseconds:
      // look for them that often. Otherwise the next tick, or at once when a worker ends.
      wait_for_event(std::chrono::milliseconds(coordinator_->changing() ? 2 : 50));
    }
  } catch (const std::exception& e) {
    // This launcher cannot go on (a replacement it could not start, a run directory it cannot
    // write): the job ends as every failed one does, its workers stopped and its summary written.
    spdlog::error("{}", e.what());
    end("failed", std::string("the launcher: ") + e.what());
  }
  return finish();
}

void JobLaunch::open_run_dir() {
  const std::string& resume_dir = settings_.resume_dir;
  run_dir_ = !resume_dir.empty() ? fs::path(resume_dir)
             : !settings_.run_dir.empty()
                 ? fs::path(settings_.run_dir)
                 : fs::path("runs") / (cfg_.name + "-" + timestamp_for_dir());
  fs::create_directories(run_dir_ / "logs");
  fs::create_directories(run_dir_ / "checkpoints");
  write_file_atomically(run_dir_ / "config.yaml", train::to_yaml(cfg_));
  events_ = std::make_unique<EventLog>(run_dir_ / "events.jsonl");
  log::add_file((run_dir_ / "logs" / "launcher.log").string());
  spdlog::info("job '{}': {} workers, run directory {}", cfg_.name, cfg_.workers,
               run_dir_.string());
}

std::unique_ptr<elastic::Coordinator> JobLaunch::make_coordinator(bool readopt) const {
  const std::string& resume_dir = settings_.resume_dir;
  return std::make_unique<elastic::Coordinator>(elastic::CoordinatorOptions{
      .store = job_store_,
      .standby = !settings_.standby.empty(),
      .bind_host = readopt ? previous_->bind : settings_.bind,
      .port = readopt ? previous_->port : settings_.port,
      .token = token_,
      .world_size = static_cast<int>(cfg_.workers),
      .rank_limit = static_cast<int>(cfg_.workers + cfg_.elastic.max_restarts),
      .config_yaml = train::to_yaml(cfg_),
      .run_dir = fs::absolute(run_dir_).string(),
      .resume_from = resume_dir.empty() ? "" : fs::absolute(run_dir_ / "checkpoints").string(),
      .membership = {.min_workers = static_cast<int>(cfg_.elastic.min_or(cfg_.workers)),
                     .max_workers = static_cast<int>(cfg_.elastic.max_or(cfg_.workers)),
                     .failure_timeout = ms(cfg_.elastic.failure_timeout_s),
                     .join_timeout = ms(cfg_.elastic.join_timeout_s),
                     .heartbeat = ms(cfg_.elastic.heartbeat_s)},
      .journal = readoptable_ ? journal_path(fs::absolute(run_dir_)).string() : "",
      .readopt = readopt,
      .predecessor = readopt ? previous_->describe() : "",
  });
}

void JobLaunch::start_coordinator() {
  // An etcd-kept job's keys go under PREFIX/<run directory>-<start time>: a resumed run is a
  // new job there, and jobs never share keys.
  if (!settings_.run_id.empty() && cfg_.coordinator.store.empty())
    throw ConfigError("--run-id: only for a job whose coordinator.store is etcd");
  job_store_ =
      !settings_.standby.empty() ? settings_.standby
      : cfg_.coordinator.store.empty()
          ? ""
          : cfg_.coordinator.store + "/" +
                (settings_.run_id.empty() ? run_dir_.filename().string() + "-" + timestamp_for_dir()
                                          : settings_.run_id);
  // Local workers with the embedded store outlive this process (readopt.h): its store keeps a
  // journal, and a coordinator started again with --resume re-adopts them.
  readoptable_ = job_store_.empty() && settings_.launcher == LauncherKind::Local && !python_ &&
                 !cfg_.sync.uses_servers();
  if (!settings_.resume_dir.empty() && readoptable_) previous_ = orphaned_job(run_dir_);
  // The token of a job whose coordinator may start again is kept in the run directory (0600),
  // unless --token-file names its file; removed with the journal when the job ends.
  const std::string run_token = (fs::absolute(run_dir_) / "token").string();
  token_file_ = previous_ ? previous_->token_file : settings_.token_file;
  if (readoptable_ && token_file_.empty()) token_file_ = run_token;
  own_token_file_ = readoptable_ && token_file_ == run_token;
  token_ = job_token(token_file_);

  coordinator_ = make_coordinator(previous_.has_value());
  if (previous_ && (coordinator_->job_ended() ||
                    !workers_still_run(*coordinator_, ms(cfg_.elastic.failure_timeout_s +
                                                         2 * cfg_.elastic.heartbeat_s)))) {
    std::printf(
        "cohort: no worker of the job answered its new coordinator: resuming from the "
        "checkpoints\n");
    spdlog::info("no worker of the job (coordinator {}) answered: resuming from the checkpoints",
                 previous_->describe());
    coordinator_.reset();
    previous_.reset();
    coordinator_ = make_coordinator(false);
  }
  // Workers a predecessor started are this coordinator's to watch, not to start or replace.
  if (previous_) external_ = true;
  if (readoptable_) {
    CoordinatorRecord{.host = host_name(),
                      .pid = ::getpid(),
                      .bind = previous_ ? previous_->bind : settings_.bind,
                      .port = coordinator_->endpoint().port,
                      .token_file = token_file_}
        .write(run_dir_);
  }
  // The launcher's workers reach the coordinator where it listens (loopback when it listens on
  // every address); on a Slurm allocation, at this node's address.
  local_join_ = coordinator_->join_address("127.0.0.1");
  join_ =
      coordinator_->join_address(slurm_ ? slurm_->this_node_address() : std::string("127.0.0.1"));
}

void JobLaunch::announce() {
  if (!coordinator_->took_over_from().empty()) {
    events_->write({{"event", "coordinator_took_over"},
                    {"from", coordinator_->took_over_from()},
                    {"readopted", previous_.has_value()}});
    std::printf("cohort: took over the job at %s from its coordinator (%s)%s\n", join_.c_str(),
                coordinator_->took_over_from().c_str(),
                previous_ ? ", with the workers that still run" : "");
  }
  if (cfg_.dashboard.enabled)
    console_ = start_console(cfg_, local_join_, token_, run_dir_, *events_);
  events_->write({{"event", settings_.resume_dir.empty() ? "job_started" : "job_resumed"},
                  {"workers", cfg_.workers},
                  {"coordinator", join_}});
  std::printf("cohort: job '%s' with %ld workers, run directory %s\n", cfg_.name.c_str(),
              static_cast<long>(cfg_.workers), run_dir_.c_str());
  std::fflush(stdout);
}

void JobLaunch::start_workers() {
  handle_stop_signals();
  start_ = Clock::now();
  if (settings_.external) {
    std::printf("cohort: waiting for %ld workers: cohort worker --join %s --token-file %s\n",
                static_cast<long>(cfg_.workers), join_.c_str(),
                (settings_.token_file.empty() ? "<file with the job token>"
                                              : settings_.token_file.c_str()));
    std::fflush(stdout);
  }
  local_host_ = store::is_etcd(local_join_) ? "127.0.0.1" : net::Endpoint::parse(local_join_).host;
  command_ = std::make_unique<WorkerCommand>(WorkerCommand{.executable = elastic::self_executable(),
                                                           .join = join_,
                                                           .token = token_,
                                                           .threads = cfg_.threads_per_worker});
  // Local workers and servers are forked by a spawner that has libtorch loaded already.
  starter_ = std::make_unique<ProcessStarter>(
      *command_, !python_ && settings_.launcher == LauncherKind::Local && !external_);
  // sync.mode ssp and async: the parameter servers, before the workers that need them.
  if (cfg_.sync.uses_servers()) {
    ps_store_ = store::connect(local_join_, {.token = token_});
    servers_ = std::make_unique<ServerFleet>(cfg_, *ps_store_, *command_, *starter_,
                                             (run_dir_ / "logs").string(), external_, *events_);
    servers_->start();
    for (int i = 0; external_ && i < cfg_.parameter_servers; ++i) {
      std::printf("cohort: and server %d: %s\n", i,
                  servers_->external_command(i, settings_.token_file).c_str());
    }
  }
  if (python_) rendezvous_ = std::make_unique<TorchRendezvous>(local_host_, 0, cfg_.workers);
  for (int r = 0; r < (external_ ? 0 : cfg_.workers); ++r) {
    pid_t pid = spawn(r, r);
    events_->write({{"event", "worker_started"}, {"rank", r}, {"pid", pid}});
  }
  // --launcher mpirun: every worker under one mpirun, which ends once they all have.
  if (settings_.launcher == LauncherKind::Mpirun) {
    WorkerCommand w = *command_;
    w.log = (run_dir_ / "logs" / "mpirun.log").string();
    elastic::SpawnOptions how = mpirun_workers(w, cfg_.workers, settings_.launcher_args);
    how.die_with_parent = !store::is_etcd(join_);  // as the local workers, in spawn()
    group_ = elastic::ChildProcess::spawn(how);
    events_->write({{"event", "workers_started"}, {"launcher", "mpirun"}, {"pid", group_->pid()}});
  }
  // A job bound to one interface has no store on 127.0.0.1.
  debug_store_ = store::connect(local_join_, {.token = token_});
  hang_watch_ =
      std::make_unique<trace::HangWatch>(*debug_store_, elastic::keys::kDebugPrefix,
                                         static_cast<int>(cfg_.workers), cfg_.debug.hang_timeout_s);
  next_hang_check_ = next_straggler_check_ = Clock::now();
  metrics_.open(run_dir_ / "metrics.jsonl", std::ios::app);
}

pid_t JobLaunch::spawn(int r, int slot) {
  slot_of_[r] = slot;
  std::string log = (run_dir_ / "logs" / ("rank-" + std::to_string(r) + ".log")).string();
  WorkerCommand w = *command_;
  w.log = log;
  elastic::SpawnOptions how =
      python_  ? python_worker_process(cfg_, {.rank = r,
                                              .slot = slot,
                                              .restarts = restarts_,
                                              .world_size = static_cast<int>(cfg_.workers),
                                              .coordinator = local_join_,
                                              .master_addr = local_host_,
                                              .master_port = rendezvous_->port(),
                                              .token = token_,
                                              .run_dir = fs::absolute(run_dir_).string(),
                                              .log = log})
      : slurm_ ? slurm_worker(*slurm_, w, r)
               : local_worker(w, r);
  if (!slurm_) bind_to_share(how, slot);
  // With the store in etcd the workers outlive this process: a standby takes them over; with
  // the embedded store, a coordinator started again with --resume (readopt.h).
  how.die_with_parent = !store::is_etcd(join_) && !readoptable_;
  auto child = starter_->start(how);
  coordinator_->worker_started(r, child.pid());
  pid_t pid = child.pid();
  workers_.emplace(r, std::move(child));
  return pid;
}

void JobLaunch::bind_to_share(elastic::SpawnOptions& how, int slot) const {
  if (!settings_.bind_to_cpus) return;
  const auto workers = static_cast<int>(cfg_.workers);
  const std::vector<int> cpus = allowed_cpus();
  // A replacement takes the share of the rank it replaces; none when oversubscribed.
  how.cpus = cpu_share(cpus, slot, workers);
  if (!how.cpus.empty()) how.env[kHostCpusVariable] = std::to_string(cpus.size());
}

bool JobLaunch::joiners_possible() {
  if (external_) return false;
  if (restarts_ < cfg_.elastic.max_restarts) return true;
  for (auto& [r, w] : workers_) {
    const auto& m = coordinator_->members();
    if (r >= cfg_.workers && !exit_ok_.count(r) && !coordinator_->is_lost(r) &&
        std::find(m.begin(), m.end(), r) == m.end()) {
      return true;
    }
  }
  return false;
}

void JobLaunch::forward_metrics() {
  for (auto& m : coordinator_->poll_metrics()) {
    metrics_ << m.dump() << "\n";
    metrics_.flush();
    progress_.record(m);
    if (console_) console_->monitor().add_metric(m);
  }
}

void JobLaunch::forward_worker_events() {
  for (auto& e : coordinator_->poll_worker_events()) {
    if (e.value("event", "") == "resumed_from_checkpoint") {
      progress_.end_line();
      auto skipped = e.value("skipped", json::array());
      std::printf("cohort: resuming from %s (step %ld)\n",
                  e.value("path", std::string("?")).c_str(), e.value("step", 0L));
      for (const auto& why : skipped) {
        std::printf("cohort: skipped a checkpoint that does not verify: %s\n",
                    why.get<std::string>().c_str());
      }
      std::fflush(stdout);
    }
    events_->write(e);
  }
}

void JobLaunch::reap_workers() {
  for (auto& [r, w] : workers_) {
    auto st = w.poll();
    if (!st || exit_ok_.count(r)) continue;
    exit_ok_[r] = st->ok();
    spdlog::info("rank {} (pid {}) exited: {}", r, w.pid(), st->describe());
    events_->write({{"event", "worker_exited"},
                    {"rank", r},
                    {"pid", w.pid()},
                    {"status", st->describe()},
                    {"excluded", st->code == train::kExitExcluded && st->signal == 0}});
    coordinator_->worker_exited(r, st->ok(), st->describe());
    if (console_) console_->monitor().worker_exited(r, st->describe(), st->ok());
  }
}

// The coordinator's view of the membership: losses reported, epochs announced, replacements
// started for lost workers while restarts are left.
void JobLaunch::follow_membership() {
  coordinator_->expect_joiners(joiners_possible());
  for (auto& e : coordinator_->tick()) {
    if (e.value("event", "") == "worker_lost") {
      char line[512];
      std::snprintf(line, sizeof(line), "rank %d (host %s, pid %ld): %s", e.value("rank", -1),
                    e.value("host", std::string("?")).c_str(), e.value("pid", 0L),
                    e.value("cause", std::string("?")).c_str());
      losses_.push_back(line);
      progress_.end_line();
      std::printf("cohort: lost %s\n", line);
    } else if (e.value("event", "") == "membership_changed") {
      progress_.end_line();
      std::printf("cohort: membership epoch %d: %zu workers\n", e.value("epoch", 0),
                  e.value("members", json::array()).size());
    }
    std::fflush(stdout);
    events_->write(e);
  }
  for (int lost : coordinator_->take_lost()) {
    if (external_ || restarts_ >= cfg_.elastic.max_restarts) continue;
    ++restarts_;
    int r = next_rank_++;
    const auto was = slot_of_.find(lost);
    pid_t pid = spawn(r, was != slot_of_.end() ? was->second : lost % cfg_.workers);
    events_->write({{"event", "worker_started"}, {"rank", r}, {"pid", pid}, {"replaces", lost}});
    if (console_) console_->monitor().add_worker(r, lost);
  }
  coordinator_->expect_joiners(joiners_possible());
  // Hangs are looked for among the current members: a replacement's too, a lost rank's no more.
  if (hang_watch_) hang_watch_->set_members(coordinator_->members());
}

bool JobLaunch::supervise_once() {
  if (!coordinator_->leads()) {
    for (auto& [r, w] : workers_) w.release();
    if (group_) group_->release();
    if (servers_) servers_->release();
    return end("failed",
               "this coordinator lost the lead of the job (its etcd lease expired); a standby "
               "that takes it over goes on with the workers");
  }
  forward_metrics();
  if (int sig = stop_signal()) {
    return end("cancelled", std::string("stopped by signal ") + sigabbrev_np(sig));
  }
  forward_worker_events();
  // A worker's own fatal error (bad data, a bug) ends the job: restarting would repeat it.
  if (auto reported = coordinator_->failure()) {
    end("failed", "rank " + std::to_string(reported->first) + ": " + reported->second);
    if (cfg_.workers > 1 &&
        (hang_watch_->timeout_reported() || error_.find("timed out") != std::string::npos)) {
      report_hang(*hang_watch_, workers_, run_dir_, *events_, "a collective timed out: " + error_);
    }
    return false;
  }
  reap_workers();
  follow_membership();
  if (servers_) {
    if (auto why = servers_->tick()) return end("failed", *why);
    if (!joiners_possible() && !coordinator_->changing()) {
      servers_->retire_orphans(coordinator_->members());
    }
    if (console_) console_->monitor().set_servers(servers_->rows());
  }
  if (group_ && group_->poll() && !coordinator_->summaries()) {
    return end("failed", "mpirun " + group_->poll()->describe() +
                             " before the job completed (its output: logs/mpirun.log)");
  }
  if (auto why = coordinator_->abandoned()) {
    end("failed", (losses_.empty() ? "" : "lost " + losses_.back() + "; ") + *why);
    // A worker declared lost whose process is still there is stuck (hung, stopped): say where.
    bool lost_but_alive = false;
    for (auto& [r, w] : workers_) lost_but_alive |= coordinator_->is_lost(r) && !w.poll();
    if (cfg_.workers > 1 && (lost_but_alive || hang_watch_->timeout_reported() ||
                             error_.find("timed out") != std::string::npos)) {
      report_hang(*hang_watch_, workers_, run_dir_, *events_, "a collective timed out: " + error_);
    }
    return false;
  }
  // A Python program's workers are done when their processes are: one that posted its summary
  // may still be running the end of its script. A replacement still waiting to be admitted
  // then comes too late (it is stopped).
  if (!python_ && coordinator_->summaries()) return false;
  if (python_ && !coordinator_->members().empty()) {
    bool all_succeeded = true;
    for (int r : coordinator_->members()) all_succeeded &= exit_ok_.count(r) && exit_ok_[r];
    if (all_succeeded) return false;
  }
  if (!external_ && exit_ok_.size() == workers_.size()) {
    return end("failed",
               (python_ ? "every worker exited" : "every worker exited without a final summary") +
                   (losses_.empty() ? std::string() : " (lost " + losses_.back() + ")"));
  }
  watch_for_hangs();
  return true;
}

}  // namespace detail

std::string timestamp_for_dir() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", &tm);
  return buf;
}

int run_job(const train::JobConfig& cfg, const RunSettings& settings) {
  return detail::JobLaunch(cfg, settings).run();
}

}  // namespace cohort::cli
