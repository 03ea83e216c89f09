#include "cohort/elastic/agent.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "cohort/elastic/job_protocol.h"
#include "cohort/elastic/leadership.h"
#include "cohort/store/connect.h"

namespace cohort::elastic {

using nlohmann::json;
using store::to_bytes;
using store::to_string;

namespace {
// The heartbeat thread looks for the coordinator's request at least this often.
constexpr Millis kWatchSlice{200};
}  // namespace

int Membership::rank_of(int rank) const {
  auto it = std::find(members.begin(), members.end(), rank);
  return it == members.end() ? -1 : static_cast<int>(it - members.begin());
}

Membership Membership::parse(const std::string& text) {
  try {
    auto j = json::parse(text);
    return Membership{.epoch = j.at("epoch").get<int>(),
                      .members = j.at("members").get<std::vector<int>>()};
  } catch (const json::exception& e) {
    throw ProtocolError("unreadable membership record '" + text + "': " + e.what());
  }
}

WorkerAgent::WorkerAgent(store::Store& store, AgentOptions options)
    : store_(store), options_(std::move(options)) {
  thread_ = std::thread([this] { heartbeat_loop(); });
}

WorkerAgent::~WorkerAgent() {
  {
    std::lock_guard lk(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  thread_.join();
  disconnect("");
}

void WorkerAgent::fence(const std::string& why) {
  if (cut_off_.load()) return;
  cut_off_reason_ = why;
  cut_off_ = true;
  spdlog::error("{}", why);
  std::lock_guard lk(comm_mu_);
  if (comm_) comm_->abort(why);
}

bool WorkerAgent::coordinator_away() const {
  const Clock::time_point seen{Clock::duration(coordinator_seen_.load())};
  return Clock::now() - seen > 2 * options_.heartbeat;
}

void WorkerAgent::heartbeat_loop() {
  std::unique_ptr<store::Store> store;
  auto next_beat = Clock::now();
  bool warned = false;
  const std::string who = "rank " + std::to_string(options_.rank);
  for (;;) {
    {
      std::unique_lock lk(stop_mu_);
      if (stop_) return;
      if (cut_off_.load()) {
        stop_cv_.wait(lk, [&] { return stop_; });
        return;
      }
    }
    const Clock::time_point seen{Clock::duration(coordinator_seen_.load())};
    if (options_.coordinator_wait.count() > 0 && Clock::now() - seen >= options_.coordinator_wait) {
      const std::string waited = std::to_string(options_.coordinator_wait.count()) +
                                 " ms (elastic.coordinator_wait_s): ";
      fence(store::is_etcd(options_.store)
                ? who + ": no coordinator has led the job (job/coordinator in " + options_.store +
                      ") for " + waited + "this worker leaves it"
                : who + ": no heartbeat reached the coordinator (through the job's store " +
                      options_.store + ") for " + waited +
                      "it is gone or out of reach, and this worker leaves the job");
      continue;
    }
    try {
      // A short connect timeout: a worker whose coordinator is gone must still exit promptly.
      if (!store) {
        store = store::connect(options_.store,
                               {.token = options_.token,
                                .timeout = std::max<Millis>(options_.heartbeat, Millis(2000))});
      }
      beat(*store, next_beat);
      warned = false;
    } catch (const std::exception& e) {
      if (!warned) spdlog::warn("heartbeat to the coordinator failed: {}", e.what());
      warned = true;
      store.reset();
      std::unique_lock lk(stop_mu_);
      stop_cv_.wait_for(lk, options_.heartbeat, [&] { return stop_; });
    }
  }
}

void WorkerAgent::stand_by(store::Store& store) {
  if (standby_ && standby_->poll()) standby_.reset();  // one that ended is reaped
  if (options_.standby_dir.empty() || standby_) return;
  const auto now = Clock::now();
  if (!leaderless_since_) leaderless_since_ = now;
  // A coordinator started with --standby takes the lead within moments of the lease's end.
  if (now - *leaderless_since_ < std::max<Millis>(2 * options_.heartbeat, Millis(1000))) return;
  const std::string who = "rank " + std::to_string(options_.rank);
  try {
    // The job's keys are gone: it ended (its coordinator removed them), nothing to stand by for.
    if (!store.check({keys::kConfig})) {
      fence(who + ": the job's keys are gone from " + options_.store + ": it ended");
      return;
    }
    const store::Bytes was =
        store.check({keys::kStandbyClaim}) ? store.get(keys::kStandbyClaim) : store::Bytes{};
    if (!was.empty()) {
      // Claimed by a worker whose standby has not led yet: its turn, unless it is long past.
      const json claim = json::parse(to_string(was), nullptr, /*allow_exceptions=*/false);
      const double at = claim.is_object() ? claim.value("time", 0.0) : 0.0;
      const double patience = std::max(10.0, 10 * std::chrono::duration<double>(
                                                       options_.heartbeat).count());
      if (wall_seconds() - at < patience) return;
    }
    const store::Bytes mine =
        to_bytes(json{{"rank", options_.rank}, {"time", wall_seconds()}}.dump());
    if (store.compare_set(keys::kStandbyClaim, was, mine) != mine) return;
    char stamp[32];
    std::snprintf(stamp, sizeof(stamp), "%.0f", wall_seconds());
    const std::string dir = options_.standby_dir + "/standby-r" + std::to_string(options_.rank) +
                            "-" + stamp;
    std::filesystem::create_directories(dir);
    standby_ = ChildProcess::spawn({.executable = self_executable(),
                                    // The job may end before it looks: then it leaves at once.
                                    .args = {"run", "--standby", options_.store, "--standby-wait",
                                             "0", "--run-dir", dir},
                                    .stdout_path = dir + "/standby.out",
                                    .stderr_path = dir + "/standby.out",
                                    .die_with_parent = false});
    spdlog::warn("{}: the job has had no coordinator for {} ms and no standby took it over: "
                 "started one (pid {}, run directory {})",
                 who,
                 std::chrono::duration_cast<Millis>(Clock::now() - *leaderless_since_).count(),
                 standby_->pid(), dir);
  } catch (const std::exception& e) {
    spdlog::warn("{}: could not start a standby coordinator: {}", who, e.what());
  }
}

void WorkerAgent::beat(store::Store& store, Clock::time_point& next_beat) {
  const std::string who = "rank " + std::to_string(options_.rank);
  if (Clock::now() >= next_beat) {
    const bool after_gap = coordinator_away();
    store.add(keys::heartbeat(options_.rank), 1);
    if (after_gap && store.check({keys::lost(options_.rank)})) {
      fence(who + " was declared lost while its heartbeats did not get through (" +
            to_string(store.get(keys::lost(options_.rank))) +
            "): the job went on without this worker");
      return;
    }
    if (store.check({keys::kEnded})) {
      const std::string status = to_string(store.get(keys::kEnded));
      store.set(keys::left(options_.rank), {});
      fence(who + ": the job ended (" + status + "), and this worker leaves it");
      return;
    }
    if (!store::is_etcd(options_.store) || store.check({Leadership::kKey})) {
      coordinator_seen_ = Clock::now().time_since_epoch().count();
      leaderless_since_.reset();
    } else {
      stand_by(store);
    }
    next_beat = Clock::now() + options_.heartbeat;
  }
  const int epoch = connected_epoch_.load();
  const auto slice = std::min<Millis>(
      kWatchSlice, std::max<Millis>(Millis(1), std::chrono::duration_cast<Millis>(
                                                   next_beat - Clock::now())));
  if (epoch >= 0 && requested_.load() <= epoch) {
    try {
      store.wait({keys::request(epoch + 1)}, slice);
      requested_ = epoch + 1;
    } catch (const TimeoutError&) {
    }
  }
  if (epoch >= 0 && requested_.load() > epoch) {
    if (to_string(store.get(keys::request(epoch + 1))) == "abort") {
      std::lock_guard lk(comm_mu_);
      if (connected_epoch_.load() != epoch) {
        // The worker moved on to the epoch this request made (or a later one) since `epoch` was
        // read: the request is answered, and the setup under way is not the one it supersedes.
      } else if (comm_) {
        comm_->abort("membership epoch " + std::to_string(epoch + 1) +
                     " was requested (a worker was lost)");
      } else if (setup_cancel_ && !setup_cancel_->exchange(true)) {
        // Still setting up the communicator of `epoch`: its lost member would never connect.
        spdlog::warn(
            "membership epoch {} was requested (a worker was lost) while the "
            "communicator of epoch {} was being set up: giving it up",
            epoch + 1, epoch);
      }
    }
    std::unique_lock lk(stop_mu_);
    stop_cv_.wait_for(lk, slice, [&] { return stop_; });
  } else if (epoch < 0) {
    std::unique_lock lk(stop_mu_);
    stop_cv_.wait_for(lk, slice, [&] { return stop_; });
  }
}

void WorkerAgent::throw_if_cut_off() const {
  if (cut_off_.load()) throw ExcludedError(cut_off_reason_);
}

Membership WorkerAgent::wait_membership(int epoch, Clock::time_point deadline) {
  for (;;) {
    throw_if_cut_off();
    // While the coordinator is away (being started again, or a standby taking over), waiting costs
    // nothing of the deadline: coordinator_wait bounds it.
    if (coordinator_away()) deadline = std::max(deadline, Clock::now() + options_.join_timeout);
    try {
      store_.wait({keys::membership(epoch)}, kWatchSlice);
      return Membership::parse(to_string(store_.get(keys::membership(epoch))));
    } catch (const TimeoutError&) {
    } catch (const PeerLostError&) {
      // The store went away during the wait: its successor answers the next one.
    }
    if (!coordinator_away() && store_.check({keys::kAbandoned})) {
      throw Error("the coordinator gave up on the job: " + to_string(store_.get(keys::kAbandoned)));
    }
    if (Clock::now() >= deadline) {
      throw TimeoutError("rank " + std::to_string(options_.rank) + ": no membership epoch " +
                         std::to_string(epoch) + " within " +
                         std::to_string(options_.join_timeout.count() / 1000) + " s");
    }
  }
}

void WorkerAgent::post(const std::string& key, const store::Bytes& value) {
  for (;;) {
    throw_if_cut_off();
    try {
      store_.set(key, value);
      return;
    } catch (const TimeoutError& e) {
      spdlog::warn("waiting for the coordinator to write {}: {}", key, e.what());
    } catch (const PeerLostError& e) {
      spdlog::warn("waiting for the coordinator to write {}: {}", key, e.what());
    }
    std::unique_lock lk(stop_mu_);
    stop_cv_.wait_for(lk, options_.heartbeat, [&] { return stop_; });
  }
}

void WorkerAgent::wait_for_a_coordinator(Millis limit) {
  const auto deadline = Clock::now() + limit;
  bool said = false;
  std::unique_lock lk(stop_mu_);
  while (coordinator_away() && !cut_off_.load() && !stop_ && Clock::now() < deadline) {
    if (!said) spdlog::info("finished while the job has no coordinator: waiting for one");
    said = true;
    stop_cv_.wait_for(lk, options_.heartbeat);
  }
}

Membership WorkerAgent::join() {
  throw_if_cut_off();
  const int current = std::stoi(to_string(store_.get(keys::kEpoch)));
  Membership m = Membership::parse(to_string(store_.get(keys::membership(current))));
  if (m.rank_of(options_.rank) >= 0) return m;
  post(keys::waiting(options_.rank), to_bytes(json{{"time", wall_seconds()}}.dump()));
  spdlog::info("waiting to be admitted (membership epoch {} has {} workers)", current,
               m.members.size());
  // The members admit a joiner at their next commit, however long their steps take: it waits as
  // long as the job goes on (the job's end, its abandonment or a lost coordinator end the wait).
  for (int e = current + 1;;) {
    try {
      m = wait_membership(e, Clock::now() + options_.join_timeout);
    } catch (const TimeoutError&) {
      spdlog::info("still waiting to be admitted: the workers admit one at their next commit");
      continue;
    }
    if (m.rank_of(options_.rank) >= 0) return m;
    ++e;
  }
}

Membership WorkerAgent::rejoin(const Membership& current, const json& info) {
  throw_if_cut_off();
  const int target = current.epoch + 1;
  post(keys::ready(target, options_.rank), to_bytes(info.dump()));
  Membership m = wait_membership(target, Clock::now() + options_.join_timeout);
  if (m.rank_of(options_.rank) < 0) {
    throw ExcludedError("rank " + std::to_string(options_.rank) +
                        " is not a member of membership epoch " + std::to_string(target) +
                        ": the others went on without it (it was declared lost)");
  }
  return m;
}

comm::Communicator& WorkerAgent::connect(const Membership& m, std::chrono::milliseconds timeout) {
  disconnect("");
  comm::CommConfig cfg = options_.comm;
  if (timeout.count() > 0) cfg.timeout = timeout;
  cfg.rank = m.rank_of(options_.rank);
  cfg.size = static_cast<int>(m.members.size());
  cfg.store_prefix = keys::comm_prefix(m.epoch);
  if (cfg.rank < 0)
    throw Error("connect: rank is not a member of epoch " + std::to_string(m.epoch));
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  cfg.setup_cancelled = cancel;
  {
    // From here the heartbeat watches for what supersedes this epoch, setup included.
    std::lock_guard lk(comm_mu_);
    setup_cancel_ = cancel;
    connected_epoch_ = m.epoch;
  }
  std::shared_ptr<comm::Communicator> comm;
  try {
    comm = comm::Communicator::create(store_, cfg);
  } catch (...) {
    std::lock_guard lk(comm_mu_);
    setup_cancel_.reset();
    throw;
  }
  std::lock_guard lk(comm_mu_);
  setup_cancel_.reset();
  comm_ = std::move(comm);
  return *comm_;
}

std::shared_ptr<comm::Communicator> WorkerAgent::communicator() {
  std::lock_guard lk(comm_mu_);
  return comm_;
}

void WorkerAgent::disconnect(const std::string& reason) {
  std::shared_ptr<comm::Communicator> old;
  {
    std::lock_guard lk(comm_mu_);
    old = std::move(comm_);
  }
  if (old && !reason.empty()) old->abort(reason);
}

void WorkerAgent::report_recovered(const Membership& m, const json& info) {
  post(keys::recovered(m.epoch), to_bytes(info.dump()));
}

}  // namespace cohort::elastic
