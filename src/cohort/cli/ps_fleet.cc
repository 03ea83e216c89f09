#include "cohort/cli/ps_fleet.h"

#include <signal.h>

#include <algorithm>

#include "cohort/base/error.h"
#include "cohort/base/log.h"
#include "cohort/cli/job_files.h"
#include "cohort/ps/client.h"
#include "cohort/ps/view.h"
#include "cohort/store/connect.h"
#include "cohort/train/server_settings.h"

using nlohmann::json;

namespace cohort::cli {
namespace {

std::chrono::milliseconds ms(double seconds) {
  return std::chrono::milliseconds(static_cast<long>(seconds * 1000));
}

}  // namespace

ps::ServerSettings server_settings(const train::JobConfig& cfg) {
  ps::ServerSettings s;
  s.servers = static_cast<int>(cfg.parameter_servers);
  s.shard.slots = static_cast<int>(cfg.workers);
  s.shard.consistency =
      cfg.sync.mode == train::SyncKind::Async ? ps::Consistency::Async : ps::Consistency::Ssp;
  s.shard.optimizer = train::server_optimizer(cfg);
  if (cfg.sync.delay_compensation > 0) {
    s.shard.correction = ps::Correction::DelayCompensation;
    s.shard.dc_lambda = cfg.sync.delay_compensation;
  } else if (cfg.sync.lr_scale == train::LrScale::InverseStaleness) {
    s.shard.correction = ps::Correction::InverseStaleness;
  }
  s.heartbeat = ms(cfg.elastic.heartbeat_s);
  s.failure_timeout = ms(cfg.elastic.failure_timeout_s);
  return s;
}

ServerFleet::ServerFleet(const train::JobConfig& cfg, store::Store& store,
                         const WorkerCommand& command, ProcessStarter& starter, std::string log_dir,
                         bool external, EventLog& events)
    : cfg_(cfg),
      store_(store),
      command_(command),
      starter_(starter),
      log_dir_(std::move(log_dir)),
      external_(external),
      events_(events),
      manager_(store, static_cast<int>(cfg.parameter_servers), ms(cfg.elastic.failure_timeout_s)) {
  store_.set(ps::keys::kSettings, store::to_bytes(server_settings(cfg).to_json()));
}

ServerFleet::~ServerFleet() {
  stop();
}

void ServerFleet::spawn(int index) {
  const std::string log = log_dir_ + "/server-" + std::to_string(index) + ".log";
  elastic::SpawnOptions how = local_worker(command_, 0);
  how.args = {"ps-server", "--join", command_.join, "--index", std::to_string(index)};
  how.stdout_path = how.stderr_path = log;
  // With the store in etcd the job outlives this process: so do its servers.
  how.die_with_parent = !store::is_etcd(command_.join);
  processes_[index] = starter_.start(how);
  events_.write({{"event", "server_started"}, {"server", index}, {"pid", processes_[index].pid()}});
}

void ServerFleet::start() {
  if (external_) return;
  for (int i = 0; i < cfg_.parameter_servers; ++i) spawn(i);
}

std::string ServerFleet::external_command(int index, const std::string& token_file) const {
  return "cohort ps-server --join " + command_.join + " --index " + std::to_string(index) +
         " --token-file " + (token_file.empty() ? "<file with the job token>" : token_file);
}

std::optional<std::string> ServerFleet::tick() {
  for (auto& [index, p] : processes_) {
    if (!p.running()) continue;
    if (auto st = p.poll()) {
      spdlog::warn("parameter server {} (pid {}) {}", index, p.pid(), st->describe());
      events_.write({{"event", "server_exited"},
                     {"server", index},
                     {"pid", p.pid()},
                     {"status", st->describe()}});
      manager_.server_exited(index, st->describe());
    }
  }
  for (json& e : manager_.tick()) events_.write(std::move(e));
  for (int index : manager_.take_lost()) {
    ++lost_;
    if (external_) continue;
    if (restarts_ >= kRestartsPerServer * cfg_.parameter_servers) {
      return "parameter server " + std::to_string(index) + " was lost and the job's " +
             std::to_string(restarts_) + " server replacements are used up";
    }
    ++restarts_;
    auto old = processes_.find(index);
    if (old != processes_.end() && old->second.running()) old->second.signal(SIGKILL);
    spawn(index);
  }
  return manager_.failure();
}

void ServerFleet::retire_orphans(const std::vector<int>& members) {
  if (!manager_.ready()) return;
  collect_retirements();
  if (static_cast<int64_t>(members.size()) >= cfg_.workers) return;
  for (int slot = 0; slot < cfg_.workers; ++slot) {
    if (std::find(retired_.begin(), retired_.end(), slot) != retired_.end() ||
        retiring_.count(slot)) {
      continue;
    }
    // Unclaimed, the slot is its own worker's of the start, which may have died before claiming.
    const int owner = ps::slot_owner(store_, slot).rank;
    if (std::find(members.begin(), members.end(), owner) != members.end()) continue;
    if (!control_) {
      control_ =
          std::make_unique<ps::Client>(ps::ClientOptions{.store = command_.join,
                                                         .token = command_.token,
                                                         .name = "the launcher",
                                                         .timeout = ms(cfg_.comm.timeout_s)},
                                       ps::Layout({}, static_cast<int>(cfg_.parameter_servers)));
    }
    // Not waited for here: the supervising loop goes on while the shards are not set yet.
    retiring_[slot] = control_->control(ps::Control::kRetire, static_cast<uint32_t>(slot));
  }
}

void ServerFleet::collect_retirements() {
  for (auto it = retiring_.begin(); it != retiring_.end();) {
    const auto& [slot, work] = *it;
    if (!work->is_completed()) {
      ++it;
      continue;
    }
    try {
      work->wait();
      retired_.push_back(slot);
      events_.write({{"event", "slot_retired"}, {"slot", slot}});
      spdlog::warn("worker slot {} retired: its worker is gone and none will replace it", slot);
    } catch (const std::exception& e) {
      spdlog::warn("worker slot {} could not be retired yet ({}): trying again", slot, e.what());
    }
    it = retiring_.erase(it);
  }
}

void ServerFleet::release() {
  released_ = true;
  retiring_.clear();
  control_.reset();
  for (auto& [index, p] : processes_) p.release();
}

void ServerFleet::stop() {
  if (released_) return;
  retiring_.clear();
  control_.reset();
  try {
    store_.set(ps::keys::kStop, store::to_bytes("1"));  // servers started elsewhere end too
  } catch (const Error& e) {
    spdlog::warn("parameter servers: cannot tell them the job is over: {}", e.what());
  }
  for (auto& [index, p] : processes_) {
    if (p.running()) p.terminate(std::chrono::seconds(5));
  }
}

json ServerFleet::rows() const {
  json rows = manager_.rows();
  for (json& r : rows) {
    auto p = processes_.find(r["server"].get<int>());
    if (p != processes_.end() && p->second.running()) r["pid"] = p->second.pid();
  }
  return rows;
}

json ServerFleet::summary() const {
  return {{"parameter_servers", cfg_.parameter_servers},
          {"servers_lost", lost_},
          {"server_restarts", restarts_},
          {"retired_slots", retired_},
          {"ps_view", manager_.view().number}};
}

}  // namespace cohort::cli
