#include "job_worker.h"

#include <unistd.h>

#include <cstdlib>
#include <thread>
#include <utility>

#include "cohort/base/error.h"
#include "cohort/base/host.h"
#include "cohort/base/log.h"
#include "cohort/elastic/job_protocol.h"
#include "cohort/trace/tracer.h"

namespace cohort::python {

using nlohmann::json;
using store::to_bytes;
using store::to_string;

namespace {

// torch.distributed's default_pg_timeout.
constexpr std::chrono::milliseconds kTorchDefaultTimeout = std::chrono::minutes(30);

std::chrono::milliseconds ms(double seconds) {
  return std::chrono::milliseconds(static_cast<long>(seconds * 1000));
}

}  // namespace

std::optional<JobWorkerOptions> JobWorker::options_from_environment() {
  const char* join = std::getenv("COHORT_JOIN");
  if (!join || !*join) return std::nullopt;
  JobWorkerOptions o;
  try {
    o.join = join;
    if (!store::is_etcd(o.join)) net::Endpoint::parse(o.join);  // a clear error now, not later
  } catch (const Error& e) {
    throw ConfigError(std::string("COHORT_JOIN='") + join + "': " + e.what());
  }
  const char* token = std::getenv("COHORT_TOKEN");
  if (!token || !*token) throw ConfigError("COHORT_JOIN is set but COHORT_TOKEN is not");
  o.token = token;
  const char* rank = std::getenv("COHORT_JOB_RANK");
  char* end = nullptr;
  const long r = rank ? std::strtol(rank, &end, 10) : -1;
  if (!rank || !*rank || *end != '\0' || r < 0 || r > 1 << 20) {
    throw ConfigError(std::string("COHORT_JOB_RANK='") + (rank ? rank : "") +
                      "' is not a rank (COHORT_JOIN is set)");
  }
  o.rank = static_cast<int>(r);
  return o;
}

JobWorker::JobWorker(const JobWorkerOptions& options) : options_(options) {
  log::init("cohort-python");
  log::set_context(options_.rank);
  store_ = store::connect(options_.join, {.token = options_.token});
  const std::string yaml = to_string(store_->get(elastic::keys::kConfig));
  config_ =
      train::parse_job_config(yaml, "job config from " + options_.join, {.check_paths = false});
  // A coordinator out of reach for longer than failure_timeout has declared this worker lost.
  const std::chrono::milliseconds reconnect(
      static_cast<long>(config_.elastic.failure_timeout_s * 1000));
  store::set_reconnect_timeout(*store_, reconnect);
  store_->set(elastic::keys::joined(options_.rank),
              to_bytes(json{{"host", host_name()}, {"pid", ::getpid()}}.dump()));
  if (store_->check({elastic::keys::kRunDir}))
    run_dir_ = to_string(store_->get(elastic::keys::kRunDir));
  recorder_ = std::make_shared<comm::FlightRecorder>(
      options_.rank, static_cast<size_t>(config_.debug.flight_recorder_entries));
  auto reporter_store =
      store::connect(options_.join, {.token = options_.token, .reconnect_timeout = reconnect});
  reporter_ = std::make_unique<trace::FlightReporter>(
      std::move(reporter_store), elastic::keys::kDebugPrefix, *recorder_, options_.rank);
  const dist::GroupSettings group = group_settings();
  agent_ = std::make_unique<elastic::WorkerAgent>(
      *store_, elastic::AgentOptions{.store = options_.join,
                                     .token = options_.token,
                                     .rank = options_.rank,
                                     .heartbeat = ms(config_.elastic.heartbeat_s),
                                     .join_timeout = ms(config_.elastic.join_timeout_s +
                                                        2 * config_.elastic.failure_timeout_s),
                                     .coordinator_wait = ms(config_.elastic.coordinator_wait_s),
                                     .comm = {.token = options_.token,
                                              .bind_host = group.bind_host,
                                              .advertise_host = group.advertise_host,
                                              .timeout = ms(config_.comm.timeout_s),
                                              .flight_recorder = recorder_,
                                              .check_collectives = group.check_collectives,
                                              .transport = group.transport,
                                              .integrity = group.integrity}});
  faults_ = std::make_unique<train::FaultInjector>(config_.faults, options_.rank, config_.workers,
                                                   config_.train.seed);
  publish_status({{"state", "starting"}, {"step", 0}});
}

elastic::Membership JobWorker::join() {
  std::lock_guard lk(mu_);
  if (!membership_) {
    membership_ = agent_->join();
    spdlog::info("joined job '{}' as rank {} of {} (store {}, membership epoch {})", config_.name,
                 options_.rank, membership_->members.size(), options_.join, membership_->epoch);
  }
  return *membership_;
}

elastic::Membership JobWorker::rejoin(const json& info, const std::string& reason) {
  const elastic::Membership current = join();
  agent_->disconnect(reason);
  elastic::Membership next = agent_->rejoin(current, info);
  std::lock_guard lk(mu_);
  membership_ = next;
  if (!reason.empty()) {
    recovering_ = true;
    recovery_ = info;
  }
  spdlog::info("membership epoch {}: rank {} of {}", next.epoch, next.rank_of(options_.rank),
               next.members.size());
  return next;
}

bool JobWorker::change_requested() const {
  return agent_->change_requested();
}

std::optional<std::string> JobWorker::comm_failure() const {
  std::shared_ptr<comm::Communicator> comm;
  {
    std::lock_guard lk(mu_);
    comm = claimed_.lock();
  }
  if (comm) {
    if (std::exception_ptr e = comm->failure()) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        return std::string(x.what());
      }
    }
  }
  if (agent_->change_requested()) return std::string("a membership change was requested");
  return std::nullopt;
}

JobWorker::~JobWorker() {
  agent_.reset();  // stops the heartbeats, then the communicator goes
  reporter_.reset();
}

dist::GroupSettings JobWorker::group_settings() const {
  // The environment's settings (where to listen), the job file's for the rest; a variable the
  // user set still wins over the job file.
  dist::GroupSettings s = dist::settings_from_environment();
  s.token = options_.token;
  if (!std::getenv("COHORT_TRANSPORT")) s.transport = comm::parse_transport(config_.comm.transport);
  if (!std::getenv("COHORT_INTEGRITY")) s.integrity = comm::parse_integrity(config_.comm.integrity);
  if (!std::getenv("COHORT_ALGORITHM")) s.algorithm = comm::parse_algorithm(config_.comm.algorithm);
  if (!std::getenv("COHORT_CHECK_COLLECTIVES"))
    s.check_collectives = config_.debug.check_collectives;
  s.exchange_clock = exchange_clock_;
  return s;
}

std::shared_ptr<comm::Communicator> JobWorker::claim(int rank, int size,
                                                     std::chrono::milliseconds timeout) {
  const elastic::Membership m = join();
  std::lock_guard lk(mu_);
  if (claimed_epoch_ == m.epoch || m.rank_of(options_.rank) != rank ||
      static_cast<int>(m.members.size()) != size) {
    return nullptr;
  }
  // A script that leaves init_process_group's timeout at torch's default gets the job file's.
  if (timeout == kTorchDefaultTimeout) timeout = ms(config_.comm.timeout_s);
  agent_->connect(m, timeout);
  std::shared_ptr<comm::Communicator> comm = agent_->communicator();
  if (!run_dir_.empty() && !step_log_) {
    // Every member of the start does this at once (the same store tells each of them the run
    // directory); a worker that joins later takes its clock as it is.
    const int64_t offset = m.epoch == 0 ? trace::measure_clock_offset(*comm) : 0;
    try {
      step_log_ = std::make_unique<trace::StepLog>(run_dir_ + "/steps/rank-" +
                                                   std::to_string(options_.rank) + ".jsonl");
      step_log_->header({.rank = options_.rank, .world = size, .clock_offset_us = offset});
    } catch (const std::exception& e) {
      spdlog::warn("no step log for cohort diagnose: {}", e.what());
    }
  }
  claimed_epoch_ = m.epoch;
  claimed_ = comm;
  // The group's reference holds this worker too (its store must outlive the communicator):
  // members go in reverse order, the communicator first.
  struct Holder {
    std::shared_ptr<JobWorker> worker;
    std::shared_ptr<comm::Communicator> comm;
  };
  auto holder = std::make_shared<Holder>(Holder{shared_from_this(), comm});
  return std::shared_ptr<comm::Communicator>(holder, comm.get());
}

void JobWorker::publish_status(json s) {
  s["rank"] = options_.rank;
  s["host"] = host_name();
  s["pid"] = ::getpid();
  if (!s.contains("time")) s["time"] = wall_seconds();
  status_ = s;
  store_->set(elastic::keys::status(options_.rank), to_bytes(s.dump()));
}

void JobWorker::report(json record) {
  const int64_t step = record.at("step").get<int64_t>();
  bool advanced = false;  // a new step, not another report of the last one
  {
    std::lock_guard lk(mu_);
    if (record.contains("samples")) samples_ += record["samples"].get<double>();
    record.erase("samples");
    // A report names what changed; the record carries everything reported so far.
    progress_.merge_patch(record);
    record = progress_;
    json status{{"state", "training"}, {"step", step}};
    for (const char* key : {"epoch", "total_steps", "loss"}) {
      if (record.contains(key)) status[key] = record[key];
    }
    // Rates over the window since the previous report (the first one's includes start-up).
    const double dt = std::chrono::duration<double>(Clock::now() - last_report_).count();
    const double steps = static_cast<double>(step - last_step_);
    const size_t world = membership_ ? membership_->members.size() : config_.workers;
    const bool lead = membership_ && membership_->rank_of(options_.rank) == 0;
    if (reports_ > 0 && dt > 0 && steps > 0) {
      status["step_time"] = dt / steps;
      progress_["steps_per_sec"] = steps / dt;
      if (samples_ > 0) {
        status["samples_per_sec"] = samples_ / dt;
        // Data-parallel workers train alike: the job's rate is this worker's times the world.
        progress_["samples_per_sec"] = samples_ * static_cast<double>(world) / dt;
      }
      record.update(progress_);  // another report of the same step keeps the last rates
    }
    record["world_size"] = world;
    log::set_step(step);
    // The step the script trains now: the next one (as Cohort's own trainer names its phases).
    recorder_->set_activity(step + 1, comm::Phase::Training);
    record["time"] = wall_seconds();
    publish_status(status);
    advanced = step != last_step_ || reports_ == 0;
    if (lead) {
      const long next = static_cast<long>(store_->add(elastic::keys::kMetricsNext, 1) - 1);
      store_->set(elastic::keys::metrics(next), to_bytes(record.dump()));
      // The first step done after a failure: the coordinator measures recovery until here.
      if (recovering_ && advanced) agent_->report_recovered(*membership_, recovery_);
    }
    if (advanced) recovering_ = false;
    if (advanced) {
      log_step(step);
      last_step_ = step;
      last_report_ = Clock::now();
      samples_ = 0;
    }
    ++reports_;
  }
  std::shared_ptr<comm::Communicator> comm;
  {
    std::lock_guard lk(mu_);
    comm = claimed_.lock();
  }
  faults_->at_step(step, comm.get());
  // The script's own time for the step (since the previous report, less that report's slowdown)
  // is what a factor multiplies.
  const double busy = std::chrono::duration<double>(Clock::now() - step_began_).count();
  if (double slow = advanced ? faults_->slowdown(step, busy) : 0; slow > 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(slow));
  }
  if (advanced) step_began_ = Clock::now();
}

void JobWorker::log_step(int64_t step) {
  const int64_t end_us = comm::now_us();
  const trace::ExchangeClock::Interval x = exchange_clock_->take(end_us);
  const comm::CollectiveTotals before = std::exchange(totals_, recorder_->totals());
  // The first report's span holds the script's start-up, not a step.
  if (!step_log_ || reports_ == 0 || !membership_) return;
  const double step_s = std::chrono::duration<double>(Clock::now() - last_report_).count();
  const double blocked = std::min(x.blocked_s, step_s);
  step_log_->append({.step = step,
                     .epoch = membership_->epoch,
                     .world = static_cast<int>(membership_->members.size()),
                     .end_us = end_us,
                     .compute_s = step_s - blocked,
                     .sync_s = blocked,
                     .ready_us = x.ready_us,
                     .sent_bytes = totals_.sent_bytes - before.sent_bytes,
                     .collective_us = totals_.active_us - before.active_us,
                     .collective_wait_us = totals_.wait_us - before.wait_us});
}

void JobWorker::finish(json summary) {
  std::lock_guard lk(mu_);
  if (ended_) return;
  ended_ = true;
  step_log_.reset();  // what is left goes to the file before the job counts this worker done
  summary["host"] = host_name();
  summary["pid"] = ::getpid();
  if (!summary.contains("steps")) summary["steps"] = last_step_;
  json status = status_;
  status["state"] = "finished";
  status.erase("time");
  publish_status(status);
  store_->set(elastic::keys::summary(options_.rank), to_bytes(summary.dump()));
}

void JobWorker::fail(const std::string& what, bool timed_out) {
  std::lock_guard lk(mu_);
  if (ended_) return;
  ended_ = true;
  step_log_.reset();
  try {
    // No longer than the coordinator waits before it declares this worker lost: a coordinator
    // that is gone must not keep the worker alive for the store's whole timeout.
    store_->set_timeout(
        std::chrono::milliseconds(static_cast<long>(config_.elastic.failure_timeout_s * 1000)));
    // Before the failure record: the launcher reads this when it sees the failure.
    // Its thread would answer the next request for reports with a snapshot that is not final.
    reporter_.reset();
    if (!trace::publish_final_report(*store_, elastic::keys::kDebugPrefix, *recorder_, what,
                                     timed_out)) {
      return;  // the coordinator is out of reach
    }
    json status = status_;
    status["state"] = "failed";
    status["error"] = what;
    status.erase("time");
    publish_status(status);
    store_->set(elastic::keys::failed(options_.rank), to_bytes(what));
  } catch (const std::exception& e) {
    // The coordinator is gone too; the exit status still tells the launcher.
    spdlog::warn("could not report the failure to the coordinator: {}", e.what());
  }
}

}  // namespace cohort::python
