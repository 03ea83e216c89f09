#include "cohort/elastic/coordinator.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "cohort/base/error.h"
#include "cohort/base/host.h"
#include "cohort/base/log.h"
#include "cohort/elastic/job_protocol.h"
#include "cohort/elastic/leadership.h"
#include "cohort/store/connect.h"
#include "cohort/store/etcd_store.h"

namespace cohort::elastic {

using nlohmann::json;
using store::to_bytes;
using store::to_string;

namespace {

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", s);
  return buf;
}

}  // namespace

Coordinator::Coordinator(const CoordinatorOptions& options) : options_(options) {
  if (store::is_etcd(options.store)) {
    // Its reads follow a check that the key is there: one that waits long is a key another
    // coordinator took (after this one lost the lead), not one to wait for.
    client_ = store::connect(options.store, {.timeout = options.membership.failure_timeout});
    const std::string me = host_name() + " pid " + std::to_string(::getpid());
    leadership_ = std::make_unique<Leadership>(store::EtcdAddress::parse(options.store),
                                               options.membership.failure_timeout, me);
    if (options.standby) {
      leadership_->wait_to_lead([&](const std::string& leader) {
        took_over_from_ = leader.empty() ? "?" : leader;
        spdlog::info("standby: the job at {} is led by {}; taking it over when that is gone",
                     options.store, took_over_from_);
      });
      fence();
      adopt();
      if (!job_ended_) client_->set(keys::kLeader, to_bytes(me));
      return;
    }
    if (client_->check({keys::kConfig}))
      throw ConfigError("etcd prefix of " + options.store + " already holds a job");
    if (!leadership_->try_lead())
      throw Error("another coordinator leads the job at " + options.store + ": " +
                  leadership_->leader());
    fence();
    client_->set(keys::kLeader, to_bytes(me));
  } else {
    if (!options.readopt && !options.journal.empty()) std::filesystem::remove(options.journal);
    server_ = std::make_unique<store::StoreServer>(
        store::StoreServerOptions{.bind_host = options.bind_host,
                                  .port = options.port,
                                  .token = options.token,
                                  .journal = options.journal});
    client_ = store::connect(join_address("127.0.0.1"), {.token = options.token});
    if (options.readopt) {
      took_over_from_ = options.predecessor;
      adopt();
      return;
    }
  }
  client_->set(keys::kConfig, to_bytes(options.config_yaml));
  client_->set(keys::kWorldSize, to_bytes(std::to_string(options.world_size)));
  client_->set(keys::kRunDir, to_bytes(options.run_dir));
  client_->set(keys::kResume, to_bytes(options.resume_from));
  known_ranks_ = options.world_size;
  for (int r = 0; r < options.world_size; ++r) members_.push_back(r);
  client_->set(keys::membership(0), to_bytes(json{{"epoch", 0}, {"members", members_}}.dump()));
  client_->set(keys::kEpoch, to_bytes("0"));
}

void Coordinator::fence() {
  // Every write of this coordinator's from now on holds only while it leads.
  static_cast<store::EtcdStore&>(*client_).fence(Leadership::kKey, leadership_->lease());
}

void Coordinator::adopt() {
  if (!client_->check({keys::kConfig, keys::kEpoch})) {
    job_ended_ = true;  // its coordinator ended it and removed its keys
    return;
  }
  // Gone before this one looked: the leader it recorded.
  if (took_over_from_.empty() && client_->check({keys::kLeader}))
    took_over_from_ = to_string(client_->get(keys::kLeader));
  if (took_over_from_.empty()) took_over_from_ = "?";
  try {
    adopt_state();
  } catch (const json::exception& e) {
    throw ProtocolError("the job's state in " + options_.store + " is not what a coordinator " +
                        "writes: " + e.what());
  } catch (const std::invalid_argument& e) {
    throw ProtocolError("the job's state in " + options_.store + " is not what a coordinator " +
                        "writes: " + e.what());
  }
  if (client_->check({keys::kLeaderSeen})) {
    try {
      takeover_seconds_ =
          std::max(0.0, wall_seconds() - std::stod(to_string(client_->get(keys::kLeaderSeen))));
    } catch (const std::exception&) {
      // Unreadable: the takeover goes unmeasured.
    }
  }
  // A worker's claim to start a standby is spent: the next loss may be claimed again.
  client_->delete_key(keys::kStandbyClaim);
  for (int m : members_) adopted_beats_[m] = client_->add(keys::heartbeat(m), 0);
  spdlog::info("took over the job from {}: membership epoch {}, {} members, {} lost",
               took_over_from_, epoch_, members_.size(), lost_.size());
}

bool Coordinator::heard_from_members() {
  for (const auto& [m, beats] : adopted_beats_) {
    if (!lost_.count(m) && client_->add(keys::heartbeat(m), 0) != beats) return true;
  }
  return false;
}

std::map<int, pid_t> Coordinator::members_on_this_host() const {
  std::map<int, pid_t> out;
  const std::string here = host_name();
  for (int m : members_) {
    auto it = workers_.find(m);
    if (it != workers_.end() && it->second.host == here && it->second.pid > 0)
      out[m] = it->second.pid;
  }
  return out;
}

void Coordinator::adopt_state() {
  epoch_ = std::stoi(to_string(client_->get(keys::kEpoch)));
  // A predecessor that died between publishing an epoch and recording it as the current one.
  while (client_->check({keys::membership(epoch_ + 1)})) ++epoch_;
  client_->set(keys::kEpoch, to_bytes(std::to_string(epoch_)));
  members_ = json::parse(to_string(client_->get(keys::membership(epoch_))))
                 .at("members")
                 .get<std::vector<int>>();
  known_ranks_ = options_.world_size;
  learn_joins();  // every rank that joined, each given a fresh failure_timeout to beat again
  for (int r = 0; r < known_ranks_; ++r) {
    if (client_->check({keys::lost(r)})) lost_.insert(r);
  }
  if (client_->check({keys::kCursors})) {
    const json c = json::parse(to_string(client_->get(keys::kCursors)));
    next_metric_ = c.value("metrics", 0L);
    next_event_ = c.value("events", 0L);
  }
  if (client_->check({keys::kRecoveryStats})) {
    const json s = json::parse(to_string(client_->get(keys::kRecoveryStats)));
    stats_ = {.recoveries = s.value("recoveries", 0),
              .recovery_seconds_max = s.value("recovery_seconds_max", 0.0),
              .steps_rolled_back = s.value("steps_rolled_back", 0L)};
  }
  if (client_->check({keys::request(epoch_ + 1)})) {
    change_ = Change{.abort = to_string(client_->get(keys::request(epoch_ + 1))) == "abort",
                     .requested = Clock::now(),
                     .below_min_since = std::nullopt};
  }
  // A predecessor that died between declaring a member lost and asking for the next epoch.
  for (int m : members_) {
    if (lost_.count(m) && !change_) {
      request_change(true, "rank " + std::to_string(m) + " lost", pending_events_);
    }
  }
}

void Coordinator::save_cursors() {
  if (keeps_state())
    client_->set(keys::kCursors,
                 to_bytes(json{{"metrics", next_metric_}, {"events", next_event_}}.dump()));
}

Coordinator::~Coordinator() {
  client_.reset();
  if (server_) server_->stop();
}

void Coordinator::end_job(const std::string& status) {
  if (!leads()) return;  // the job is another coordinator's now
  try {
    client_->set(keys::kEnded, to_bytes(status));
    // Workers that are still connected (started elsewhere, or by a predecessor) leave on seeing it.
    std::vector<std::string> left;
    for (const auto& [r, w] : workers_) {
      if (w.joined && !w.exited && !w.started_here && !lost_.count(r) &&
          !client_->check({keys::summary(r)}))
        left.push_back(keys::left(r));
    }
    if (!left.empty()) {
      try {
        client_->wait(left, 2 * options_.membership.heartbeat + Millis(1000));
      } catch (const TimeoutError& e) {
        spdlog::warn("workers that did not say they left the ended job: {}", e.what());
      }
    }
  } catch (const Error& e) {
    spdlog::warn("could not tell the workers that the job ended: {}", e.what());
  }
}

void Coordinator::forget_job() {
  if (!leads()) return;
  if (auto* etcd = dynamic_cast<store::EtcdStore*>(client_.get())) {
    try {
      etcd->delete_all();
    } catch (const Error& e) {
      spdlog::warn("could not remove the job's keys from {}: {}", options_.store, e.what());
    }
  } else if (server_) {
    client_.reset();
    server_->stop();
    if (!options_.journal.empty()) std::filesystem::remove(options_.journal);
  }
}

net::Endpoint Coordinator::endpoint() const {
  if (!server_) throw Error("the job's store is " + options_.store + ", not this process");
  return server_->endpoint();
}

std::string Coordinator::join_address(const std::string& host) const {
  if (!server_) return options_.store;
  net::Endpoint ep = server_->endpoint();
  if (ep.host.empty() || ep.host == "0.0.0.0" || ep.host == "::") ep.host = host;
  return ep.str();
}

std::vector<json> Coordinator::poll_records(std::string (*key)(long), long& next) {
  std::vector<json> out;
  if (!leads()) return out;
  std::vector<std::string> read;
  for (;;) {
    if (!client_->check({key(next)})) {
      // A rank 0 that was lost between taking a record's number and writing it leaves a gap; the
      // next writer writes after it.
      if (client_->check({key(next + 1)})) {
        ++next;
        continue;
      }
      break;
    }
    auto k = key(next);
    std::string text;
    try {
      text = to_string(client_->get(k));
    } catch (const TimeoutError&) {
      break;  // gone since the check: taken by a coordinator that leads the job now
    }
    read.push_back(k);
    ++next;
    json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded()) out.push_back(std::move(j));  // unreadable: skipped, the job goes on
  }
  // Where this coordinator got to, before the records go: one that takes over goes on from there.
  if (!read.empty()) save_cursors();
  for (const auto& k : read) client_->delete_key(k);
  return out;
}

std::vector<json> Coordinator::poll_metrics() {
  return poll_records(&keys::metrics, next_metric_);
}

std::vector<json> Coordinator::poll_worker_events() {
  return poll_records(&keys::event, next_event_);
}

int Coordinator::joined_count() {
  int n = 0;
  for (int r = 0; r < options_.world_size; ++r) {
    if (client_->check({keys::joined(r)})) ++n;
  }
  return n;
}

std::optional<std::vector<json>> Coordinator::summaries() {
  // A pending "grow" does not hold the job back: the members finished without another snapshot.
  std::vector<std::string> ks;
  for (int r : members_) ks.push_back(keys::summary(r));
  if (ks.empty() || !client_->check(ks)) return std::nullopt;
  std::vector<json> out;
  for (const auto& k : ks) out.push_back(json::parse(to_string(client_->get(k))));
  return out;
}

std::optional<std::pair<int, std::string>> Coordinator::failure() {
  for (int r = 0; r < known_ranks_; ++r) {
    if (client_->check({keys::failed(r)})) {
      return std::make_pair(r, to_string(client_->get(keys::failed(r))));
    }
  }
  return std::nullopt;
}

void Coordinator::worker_started(int rank, pid_t pid) {
  workers_[rank].pid = pid;
  workers_[rank].started_here = true;
  known_ranks_ = std::max(known_ranks_, rank + 1);
}

void Coordinator::worker_exited(int rank, bool ok, const std::string& status) {
  auto& w = workers_[rank];
  w.exited = true;
  if (ok || lost_.count(rank)) return;
  lose(rank, status, pending_events_, Clock::now());
}

std::vector<int> Coordinator::take_lost() {
  std::vector<int> out;
  out.swap(newly_lost_);
  return out;
}

json Coordinator::worker_json(int rank) const {
  json j{{"rank", rank}};
  auto it = workers_.find(rank);
  if (it != workers_.end()) {
    j["host"] = it->second.host;
    j["pid"] = it->second.pid;
  }
  return j;
}

void Coordinator::learn_joins() {
  if (client_->check({keys::kRankLimit})) {
    try {
      const int seen = std::stoi(to_string(client_->get(keys::kRankLimit)));
      known_ranks_ = std::max(known_ranks_,
                              std::min(seen, std::max(options_.rank_limit, options_.world_size)));
    } catch (const std::exception&) {
      // Unreadable: the ranks known so far stay.
    }
  }
  for (int r = 0; r < known_ranks_; ++r) {
    auto& w = workers_[r];
    if (w.joined || !client_->check({keys::joined(r)})) continue;
    w.joined = true;
    json j =
        json::parse(to_string(client_->get(keys::joined(r))), nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("host") && j["host"].is_string()) {
      w.host = j["host"].get<std::string>();
    } else {
      w.host = "unknown";
    }
    if (j.is_object() && j.contains("pid") && j["pid"].is_number_integer()) {
      w.pid = j["pid"].get<pid_t>();
    }
    w.beats = client_->add(keys::heartbeat(r), 0);
    w.last_beat = Clock::now();
  }
}

void Coordinator::check_heartbeats(std::vector<json>& events) {
  const auto now = Clock::now();
  for (auto& [r, w] : workers_) {
    if (!w.joined || w.exited || lost_.count(r)) continue;
    if (client_->check({keys::summary(r)})) continue;  // finished: about to exit
    int64_t beats = client_->add(keys::heartbeat(r), 0);
    if (beats != w.beats) {
      w.beats = beats;
      w.last_beat = now;
      continue;
    }
    double silent = seconds_between(w.last_beat, now);
    if (silent * 1000 > static_cast<double>(options_.membership.failure_timeout.count())) {
      lose(r,
           "heartbeat missed: none for " + seconds_text(silent) + " (elastic.failure_timeout_s " +
               seconds_text(options_.membership.failure_timeout.count() / 1000.0) + ")",
           events, w.last_beat);
    }
  }
}

std::string Coordinator::comm_record_against(int rank) {
  auto it = std::find(members_.begin(), members_.end(), rank);
  if (it == members_.end()) return "";
  const int comm_rank = static_cast<int>(it - members_.begin());
  for (size_t i = 0; i < members_.size(); ++i) {
    std::string key = keys::comm_prefix(epoch_) + "/failed/" + std::to_string(i);
    if (!client_->check({key})) continue;
    std::string rec = to_string(client_->get(key));
    auto nl = rec.find('\n');
    if (nl == std::string::npos) continue;
    if (rec.substr(0, nl) == std::to_string(comm_rank)) {
      return "rank " + std::to_string(members_[i]) + " lost its connection: " + rec.substr(nl + 1);
    }
  }
  return "";
}

void Coordinator::lose(int rank, const std::string& cause, std::vector<json>& events,
                       Clock::time_point failed_at) {
  if (lost_.count(rank)) return;
  lost_.insert(rank);
  newly_lost_.push_back(rank);
  client_->set(keys::lost(rank), to_bytes(cause));
  const bool member = std::find(members_.begin(), members_.end(), rank) != members_.end();
  json e = worker_json(rank);
  e["event"] = "worker_lost";
  e["cause"] = cause;
  e["epoch"] = epoch_;
  e["member"] = member;
  events.push_back(e);
  spdlog::warn("worker {} lost: {}", rank, cause);
  if (!member) return;
  if (!failure_at_ || failed_at < *failure_at_) failure_at_ = failed_at;
  if (!change_) {
    request_change(true, "rank " + std::to_string(rank) + " lost", events);
  } else if (!change_->abort) {
    // Joiners were waiting for a snapshot boundary that the lost member will never reach.
    change_->abort = true;
    change_->requested = Clock::now();
    client_->set(keys::request(epoch_ + 1), to_bytes("abort"));
  }
}

void Coordinator::request_change(bool abort, const std::string& reason, std::vector<json>& events) {
  const int target = epoch_ + 1;
  client_->set(keys::request(target), to_bytes(abort ? "abort" : "grow"));
  change_ = Change{.abort = abort, .requested = Clock::now(), .below_min_since = std::nullopt};
  events.push_back({{"event", "membership_change_requested"},
                    {"epoch", target},
                    {"kind", abort ? "abort" : "grow"},
                    {"reason", reason}});
}

std::vector<int> Coordinator::waiting_joiners() {
  std::vector<int> out;
  for (int r = 0; r < known_ranks_; ++r) {
    if (lost_.count(r) || std::find(members_.begin(), members_.end(), r) != members_.end())
      continue;
    if (client_->check({keys::waiting(r)})) out.push_back(r);
  }
  return out;
}

void Coordinator::abandon(const std::string& why, std::vector<json>& events) {
  abandoned_ = why;
  client_->set(keys::kAbandoned, to_bytes(why));
  events.push_back({{"event", "job_abandoned"}, {"reason", why}});
}

void Coordinator::advance_change(std::vector<json>& events) {
  const int target = epoch_ + 1;
  const auto now = Clock::now();
  std::vector<int> survivors, late;
  for (int m : members_) {
    if (lost_.count(m)) continue;
    survivors.push_back(m);
    if (!client_->check({keys::ready(target, m)})) late.push_back(m);
  }
  // Too few workers even once every survivor is ready, and none coming: waiting for the survivors'
  // ready reports (they may never come: a script that does not follow the protocol) is pointless.
  if (!expect_joiners_ && survivors.size() + waiting_joiners().size() <
                              static_cast<size_t>(options_.membership.min_workers)) {
    late.clear();
  }
  if (!late.empty()) {
    if (!change_->abort || now - change_->requested < options_.membership.failure_timeout) return;
    for (int m : late) {
      std::string record = comm_record_against(m);
      lose(m,
           "did not leave membership epoch " + std::to_string(epoch_) + " within " +
               seconds_text(options_.membership.failure_timeout.count() / 1000.0) +
               " of the abort request" + (record.empty() ? "" : "; " + record),
           events, change_->requested);
      std::erase(survivors, m);
    }
  }
  std::vector<int> joiners = waiting_joiners();
  const size_t room =
      static_cast<size_t>(std::max(0, options_.membership.max_workers)) > survivors.size()
          ? static_cast<size_t>(options_.membership.max_workers) - survivors.size()
          : 0;
  if (joiners.size() > room) joiners.resize(room);
  const int count = static_cast<int>(survivors.size() + joiners.size());
  if (count < options_.membership.min_workers) {
    if (!change_->below_min_since) {
      change_->below_min_since = now;
      events.push_back({{"event", "waiting_for_workers"},
                        {"epoch", target},
                        {"workers", count},
                        {"min_workers", options_.membership.min_workers}});
    }
    const bool timed_out = now - *change_->below_min_since > options_.membership.join_timeout;
    if (!expect_joiners_ || timed_out) {
      abandon("only " + std::to_string(count) + " worker" + (count == 1 ? "" : "s") +
                  " left, fewer than elastic.min_workers = " +
                  std::to_string(options_.membership.min_workers) + ", and " +
                  (timed_out ? "no replacement joined within elastic.join_timeout_s = " +
                                   seconds_text(options_.membership.join_timeout.count() / 1000.0)
                             : std::string("no replacement is coming (elastic.max_restarts "
                                           "used up)")),
              events);
    }
    return;
  }
  std::vector<int> removed;
  for (int m : members_) {
    if (std::find(survivors.begin(), survivors.end(), m) == survivors.end()) removed.push_back(m);
  }
  members_ = survivors;
  members_.insert(members_.end(), joiners.begin(), joiners.end());
  epoch_ = target;
  client_->set(keys::membership(target),
               to_bytes(json{{"epoch", target}, {"members", members_}}.dump()));
  client_->set(keys::kEpoch, to_bytes(std::to_string(target)));
  events.push_back({{"event", "membership_changed"},
                    {"epoch", target},
                    {"members", members_},
                    {"world_size", members_.size()},
                    {"added", joiners},
                    {"removed", removed},
                    {"kind", change_->abort ? "abort" : "grow"}});
  spdlog::info("membership epoch {}: {} workers", target, members_.size());
  if (change_->abort) measure_epoch_ = target;
  change_.reset();
}

void Coordinator::check_recovered(std::vector<json>& events) {
  if (measure_epoch_ < 0 || !client_->check({keys::recovered(measure_epoch_)})) return;
  json r;
  try {
    r = json::parse(to_string(client_->get(keys::recovered(measure_epoch_))));
  } catch (const json::exception&) {
  }
  const double secs = failure_at_ ? seconds_between(*failure_at_, Clock::now()) : 0.0;
  const long rolled_back = r.value("steps_rolled_back", 0L);
  stats_.recoveries += 1;
  stats_.recovery_seconds_max = std::max(stats_.recovery_seconds_max, secs);
  stats_.steps_rolled_back += rolled_back;
  if (keeps_state()) {
    client_->set(keys::kRecoveryStats,
                 to_bytes(json{{"recoveries", stats_.recoveries},
                               {"recovery_seconds_max", stats_.recovery_seconds_max},
                               {"steps_rolled_back", stats_.steps_rolled_back}}
                              .dump()));
  }
  events.push_back({{"event", "rolled_back"},
                    {"epoch", measure_epoch_},
                    {"restored_step", r.value("restored_step", 0L)},
                    {"steps_rolled_back", rolled_back}});
  events.push_back({{"event", "recovered"},
                    {"epoch", measure_epoch_},
                    {"world_size", members_.size()},
                    {"seconds", secs},
                    {"restored_step", r.value("restored_step", 0L)},
                    {"steps_rolled_back", rolled_back}});
  failure_at_.reset();
  measure_epoch_ = -1;
}

bool Coordinator::leads() const {
  return !leadership_ || leadership_->held();
}

std::vector<json> Coordinator::tick() {
  std::vector<json> events;
  if (!leads()) return events;
  events.swap(pending_events_);
  if (abandoned_) return events;
  if (keeps_state() && Clock::now() >= next_sign_of_life_) {
    client_->set(keys::kLeaderSeen, to_bytes(std::to_string(wall_seconds())));
    next_sign_of_life_ =
        Clock::now() + std::max<Millis>(options_.membership.failure_timeout / 4, Millis(250));
  }
  learn_joins();
  check_heartbeats(events);
  if (!change_) {
    // A member whose collectives failed (lost connection, deadline) has left the epoch already.
    for (size_t i = 0; i < members_.size() && !change_; ++i) {
      int m = members_[i];
      if (lost_.count(m) || !client_->check({keys::ready(epoch_ + 1, m)})) continue;
      std::string why =
          "rank " + std::to_string(m) + " left membership epoch " + std::to_string(epoch_);
      std::string key = keys::comm_prefix(epoch_) + "/failed/" + std::to_string(i);
      if (client_->check({key})) {
        std::string rec = to_string(client_->get(key));
        auto nl = rec.find('\n');
        why += ": " + (nl == std::string::npos ? rec : rec.substr(nl + 1));
      }
      if (!failure_at_) failure_at_ = Clock::now();
      request_change(true, why, events);
    }
  }
  if (!change_) {
    auto joiners = waiting_joiners();
    size_t alive = 0;
    for (int m : members_) alive += lost_.count(m) ? 0 : 1;
    if (!joiners.empty() && alive < static_cast<size_t>(options_.membership.max_workers)) {
      request_change(false, "rank " + std::to_string(joiners.front()) + " waits to join", events);
    }
  }
  if (change_) advance_change(events);
  check_recovered(events);
  return events;
}

}  // namespace cohort::elastic
