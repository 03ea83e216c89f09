#include "cohort/ps/view.h"

#include <charconv>

#include "cohort/base/error.h"
#include "cohort/base/log.h"

using nlohmann::json;

namespace cohort::ps {

SlotOwner slot_owner(store::Store& store, int s) {
  const std::string key = keys::slot(s);
  if (!store.check({key})) return {.rank = s, .record = {}};
  store::Bytes record = store.get(key);
  const std::string text = store::to_string(record);
  int rank = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), rank);
  if (ec != std::errc() || end != text.data() + text.size() || rank < 0) {
    throw ProtocolError("parameter servers: worker slot " + std::to_string(s) +
                        " has a malformed owner '" + text + "' (" + key + ")");
  }
  return {.rank = rank, .record = std::move(record)};
}

std::string View::to_json() const {
  json servers_j = json::array(), shards_j = json::array();
  for (const ServerEntry& s : servers) {
    servers_j.push_back({{"incarnation", s.incarnation}, {"address", s.address}, {"up", s.up}});
  }
  for (const ShardRoles& r : shards) {
    shards_j.push_back({{"primary", r.primary}, {"backup", r.backup}});
  }
  return json{{"view", number}, {"servers", servers_j}, {"shards", shards_j}}.dump();
}

View View::parse(const std::string& text) {
  try {
    json j = json::parse(text);
    View v;
    v.number = j.at("view").get<int64_t>();
    for (const auto& s : j.at("servers")) {
      v.servers.push_back({.incarnation = s.at("incarnation").get<uint64_t>(),
                           .address = s.at("address").get<std::string>(),
                           .up = s.at("up").get<bool>()});
    }
    const int n = static_cast<int>(v.servers.size());
    for (const auto& r : j.at("shards")) {
      ShardRoles roles{r.at("primary").get<int>(), r.at("backup").get<int>()};
      if (roles.primary < -1 || roles.primary >= n || roles.backup < -1 || roles.backup >= n) {
        throw ProtocolError("a shard's server is out of range");
      }
      v.shards.push_back(roles);
    }
    return v;
  } catch (const json::exception& e) {
    throw ProtocolError(std::string("malformed parameter-server view: ") + e.what());
  }
}

int View::primary_of(uint32_t s) const {
  if (s >= shards.size() || shards[s].primary < 0) {
    throw Error("view " + std::to_string(number) + " has no server for shard " + std::to_string(s));
  }
  return shards[s].primary;
}

std::optional<View> latest_view(store::Store& store) {
  if (!store.check({keys::kViewLatest})) return std::nullopt;
  const int64_t n = std::stoll(store::to_string(store.get(keys::kViewLatest)));
  return View::parse(store::to_string(store.get(keys::view(n))));
}

std::optional<View> wait_for_view(store::Store& store, int64_t after,
                                  std::chrono::milliseconds timeout) {
  try {
    store.wait({keys::view(after + 1)}, timeout);
  } catch (const TimeoutError&) {
    return std::nullopt;
  }
  View v = View::parse(store::to_string(store.get(keys::view(after + 1))));
  // Later views may be out too (the manager sets ps/view/<n> before ps/view_latest).
  if (auto newest = latest_view(store); newest && newest->number > v.number) return newest;
  return v;
}

ViewManager::ViewManager(store::Store& store, int servers,
                         std::chrono::milliseconds failure_timeout)
    : store_(store), servers_(servers), failure_timeout_(failure_timeout) {
  if (servers < 1) throw ConfigError("parameter_servers: at least 1");
}

void ViewManager::publish(std::vector<json>& events, const std::string& why) {
  ++view_.number;
  store_.set(keys::view(view_.number), store::to_bytes(view_.to_json()));
  store_.set(keys::kViewLatest, store::to_bytes(std::to_string(view_.number)));
  json roles = json::array();
  for (const ShardRoles& r : view_.shards) roles.push_back({r.primary, r.backup});
  events.push_back({{"event", "ps_view"}, {"view", view_.number}, {"why", why}, {"shards", roles}});
  spdlog::info("parameter servers: view {} ({})", view_.number, why);
}

std::vector<json> ViewManager::tick() {
  std::vector<json> events;
  events.swap(pending_events_);
  if (failure_) return events;
  learn_registrations(events);
  if (!ready()) return events;
  check_heartbeats(events);
  learn_synced();
  hand_back(events);
  return events;
}

void ViewManager::learn_registrations(std::vector<json>& events) {
  std::vector<int> joined;
  for (int i = 0; i < servers_; ++i) {
    const std::string key = keys::registration(i);
    if (!store_.check({key})) continue;
    json reg = json::parse(store::to_string(store_.get(key)));
    const auto inc = reg.at("incarnation").get<uint64_t>();
    if (watch_.count(i) && watch_[i].incarnation >= inc) continue;
    watch_[i] = {.incarnation = inc, .beats = -1, .last_beat = Clock::now()};
    registered_[i] = reg;
    if (ready()) joined.push_back(i);
  }
  if (!ready()) {
    if (static_cast<int>(registered_.size()) < servers_) return;
    // Every server is up: the first view.
    view_.servers.resize(static_cast<size_t>(servers_));
    view_.shards.resize(static_cast<size_t>(servers_));
    for (int i = 0; i < servers_; ++i) {
      view_.servers[i] = {registered_[i].at("incarnation").get<uint64_t>(),
                          registered_[i].at("address").get<std::string>(), true};
      view_.shards[i] = {i, servers_ > 1 ? (i + 1) % servers_ : -1};
      if (servers_ > 1) synced_.insert({static_cast<uint32_t>(i), (i + 1) % servers_});
    }
    publish(events, "every server registered");
    return;
  }
  for (int i : joined) {
    view_.servers[i] = {registered_[i].at("incarnation").get<uint64_t>(),
                        registered_[i].at("address").get<std::string>(), true};
    // The newcomer backs every shard that has no backup; its primary copies it over first.
    for (size_t s = 0; s < view_.shards.size(); ++s) {
      ShardRoles& r = view_.shards[s];
      if (r.backup == -1 && r.primary != -1 && r.primary != i) r.backup = i;
    }
    events.push_back({{"event", "server_joined"},
                      {"server", i},
                      {"incarnation", view_.servers[i].incarnation},
                      {"address", view_.servers[i].address}});
    publish(events, "server " + std::to_string(i) + " joined");
  }
}

void ViewManager::check_heartbeats(std::vector<json>& events) {
  const auto now = Clock::now();
  for (int i = 0; i < servers_; ++i) {
    if (!view_.servers[i].up) continue;
    Watch& w = watch_[i];
    const int64_t beats = store_.add(keys::heartbeat(w.incarnation), 0);
    if (beats != w.beats) {
      w.beats = beats;
      w.last_beat = now;
    } else if (now - w.last_beat > failure_timeout_) {
      lose(i,
           "no heartbeat for " + std::to_string(failure_timeout_.count()) +
               " ms (stopped, hung "
               "or cut off)",
           events);
    }
  }
}

void ViewManager::learn_synced() {
  for (size_t s = 0; s < view_.shards.size(); ++s) {
    const int b = view_.shards[s].backup;
    if (b < 0 || synced_.count({static_cast<uint32_t>(s), b})) continue;
    if (store_.check({keys::synced(static_cast<uint32_t>(s), view_.servers[b].incarnation)})) {
      synced_.insert({static_cast<uint32_t>(s), b});
    }
  }
}

// Shard s's first primary is server s. Once a replacement for server s holds shard s's state as
// its backup, the two swap roles: the replacement serves the shard again and the server that
// stood in for it goes back to backing it, so one failure does not leave one server with twice
// the pushes of the others for the rest of the job. The server stepping down holds every
// acknowledged push (it was the primary), so it counts as holding the state at once; it gets
// its new primary's whole shard before any change (server.h).
void ViewManager::hand_back(std::vector<json>& events) {
  std::vector<int> handed;
  for (size_t s = 0; s < view_.shards.size(); ++s) {
    ShardRoles& r = view_.shards[s];
    const int home = static_cast<int>(s);
    const auto shard = static_cast<uint32_t>(s);
    if (r.primary == home || r.primary < 0 || r.backup != home || !view_.servers[home].up ||
        !synced_.count({shard, home})) {
      continue;
    }
    synced_.erase({shard, home});
    synced_.insert({shard, r.primary});
    events.push_back({{"event", "ps_hand_back"},
                      {"shard", s},
                      {"from", r.primary},
                      {"to", home},
                      {"incarnation", view_.servers[home].incarnation}});
    spdlog::info("parameter servers: shard {} goes back to server {} (from server {})", s, home,
                 r.primary);
    r.backup = r.primary;
    r.primary = home;
    handed.push_back(home);
  }
  if (handed.empty()) return;
  std::string why = "shard";
  if (handed.size() > 1) why += "s";
  for (size_t i = 0; i < handed.size(); ++i) {
    why += (i ? ", " : " ") + std::to_string(handed[i]);
  }
  publish(events, why + " handed back to " + (handed.size() > 1 ? "their servers" : "its server"));
}

void ViewManager::server_exited(int index, const std::string& status) {
  if (index < 0 || index >= servers_ || !ready() || !view_.servers[index].up) return;
  std::vector<json> events;
  lose(index, "its process " + status, events);
  pending_events_.insert(pending_events_.end(), events.begin(), events.end());
}

void ViewManager::lose(int index, const std::string& cause, std::vector<json>& events) {
  learn_synced();  // a backup that finished copying just now still counts
  view_.servers[index].up = false;
  events.push_back({{"event", "server_lost"},
                    {"server", index},
                    {"incarnation", view_.servers[index].incarnation},
                    {"cause", cause}});
  spdlog::warn("parameter server {} lost: {}", index, cause);
  for (size_t s = 0; s < view_.shards.size(); ++s) {
    ShardRoles& r = view_.shards[s];
    const auto shard = static_cast<uint32_t>(s);
    if (r.backup == index) {
      synced_.erase({shard, index});
      r.backup = -1;
    }
    if (r.primary != index) continue;
    if (r.backup >= 0 && synced_.count({shard, r.backup})) {
      r.primary = r.backup;
      synced_.erase({shard, r.backup});
      r.backup = -1;
    } else {
      const std::string what = "parameter-server shard " + std::to_string(s) +
                               " is lost: its primary, server " + std::to_string(index) + ", " +
                               cause + ", and it had no backup holding its state";
      failure_ = failure_ ? *failure_ + "; " + what : what;
      r.primary = -1;
    }
  }
  lost_.push_back(index);
  publish(events, "server " + std::to_string(index) + " lost");
}

json ViewManager::rows() const {
  json out = json::array();
  const auto now = Clock::now();
  for (int i = 0; i < servers_; ++i) {
    json r{{"server", i}, {"state", "starting"}};
    if (static_cast<size_t>(i) < view_.servers.size()) {
      const ServerEntry& e = view_.servers[static_cast<size_t>(i)];
      r["incarnation"] = e.incarnation;
      r["address"] = e.address;
      r["state"] = e.up ? "up" : "lost";
      json primary = json::array(), backup = json::array();
      for (size_t s = 0; s < view_.shards.size(); ++s) {
        if (e.up && view_.shards[s].primary == i) primary.push_back(s);
        if (e.up && view_.shards[s].backup == i) backup.push_back(s);
      }
      r["primary_of"] = primary;
      r["backup_of"] = backup;
    }
    if (auto w = watch_.find(i); w != watch_.end() && w->second.beats >= 0) {
      r["heartbeat_age_seconds"] = std::chrono::duration<double>(now - w->second.last_beat).count();
    }
    out.push_back(r);
  }
  return out;
}

std::vector<int> ViewManager::take_lost() {
  std::vector<int> out;
  out.swap(lost_);
  return out;
}

}  // namespace cohort::ps
