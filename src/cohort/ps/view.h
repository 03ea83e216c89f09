// Views: which parameter server holds which shard, as the job's store says. The launcher's
// ViewManager is the one writer; servers and workers read.
//
// A job has N servers and N shards (layout.h). In the first view shard i's primary is server i
// and its backup server i + 1 (mod N), so that every server is primary of one shard and backup
// of the one before. A push is answered only once the backup has applied it too (server.h), so a
// server can die without losing an acknowledged push: the ViewManager publishes a view in which
// the backup is primary, the workers send there, and a replacement server, once it has
// registered, becomes the backup of every shard left without one (its primary copies it the
// whole shard first). Once the replacement for server i holds shard i, the two swap roles (a
// hand-back): shard i is served by server i again, backed by the server that stood in for it, so
// the load is as even as in the first view. Only a backup that holds its shard's state is
// promoted; a shard whose primary and backup are both gone is lost, and the job with it.
//
// Keys (under the job's store):
//   ps/settings              the servers' settings (JSON, ServerSettings in server.h)
//   ps/incarnation           counter: each server process takes the next number
//   ps/register/<index>      the newest process for server <index>: {"incarnation", "address"}
//   ps/heartbeat/<inc>       counter each server process adds to every heartbeat
//   ps/synced/<shard>/<inc>  server process <inc> holds shard <shard>'s state (a new backup)
//   ps/view/<n>              view n (JSON), n = 1, 2, ...
//   ps/view_latest           the newest n
//   ps/stop                  the job is over: servers started elsewhere end too
//   ps/slot/<slot>           the job rank of the worker that trains slot <slot> (its data shard
//                            and its clock); a replacement takes over a slot whose worker is gone
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cohort/base/clock.h"
#include "cohort/store/store.h"

namespace cohort::ps {

namespace keys {
inline const std::string kSettings = "ps/settings";
inline const std::string kIncarnation = "ps/incarnation";
inline const std::string kViewLatest = "ps/view_latest";
inline const std::string kStop = "ps/stop";
inline std::string registration(int index) {
  return "ps/register/" + std::to_string(index);
}
inline std::string heartbeat(uint64_t incarnation) {
  return "ps/heartbeat/" + std::to_string(incarnation);
}
inline std::string synced(uint32_t shard, uint64_t incarnation) {
  return "ps/synced/" + std::to_string(shard) + "/" + std::to_string(incarnation);
}
inline std::string view(int64_t n) {
  return "ps/view/" + std::to_string(n);
}
inline std::string slot(int s) {
  return "ps/slot/" + std::to_string(s);
}
}  // namespace keys

// Who trains worker slot `s`: the rank in keys::slot(s), or, while nobody claimed it, worker `s`
// of the start (slot s is its own). `record` is the key's value (empty while unclaimed), what a
// compare_set that takes the slot over must expect.
struct SlotOwner {
  int rank;
  store::Bytes record;
};
SlotOwner slot_owner(store::Store& store, int s);

struct ServerEntry {
  uint64_t incarnation = 0;
  std::string address;  // HOST:PORT
  bool up = false;
  bool operator==(const ServerEntry&) const = default;
};

struct ShardRoles {
  int primary = -1;  // server index; -1: none
  int backup = -1;
  bool operator==(const ShardRoles&) const = default;
};

struct View {
  int64_t number = 0;
  std::vector<ServerEntry> servers;  // by server index
  std::vector<ShardRoles> shards;    // by shard
  std::string to_json() const;
  // Throws ProtocolError when the text is not a view.
  static View parse(const std::string& text);
  // The server index and entry that serve shard `s` as primary (throws Error when none).
  int primary_of(uint32_t s) const;
  bool operator==(const View&) const = default;
};

// The newest view in the store, or nullopt when none was published yet.
std::optional<View> latest_view(store::Store& store);
// Waits until a view newer than `after` is published (or `timeout` passes) and returns the
// newest; nullopt on timeout.
std::optional<View> wait_for_view(store::Store& store, int64_t after,
                                  std::chrono::milliseconds timeout);

// The launcher's side: publishes views as servers register, die and are replaced.
class ViewManager {
 public:
  ViewManager(store::Store& store, int servers, std::chrono::milliseconds failure_timeout);

  // Looks at registrations, heartbeats and synced backups; publishes a new view when anything
  // changed. Returns events for events.jsonl (ps_view, server_lost, server_joined,
  // ps_hand_back).
  std::vector<nlohmann::json> tick();
  // The launcher saw server <index>'s process end.
  void server_exited(int index, const std::string& status);
  // Server indices lost since the last call (the launcher may start replacements).
  std::vector<int> take_lost();
  // Why the job cannot go on (a shard lost with both its copies), once that happened.
  std::optional<std::string> failure() const { return failure_; }
  bool ready() const { return view_.number > 0; }
  // One row per server for the console: server, incarnation, address, state ("up", "lost",
  // "starting"), primary_of and backup_of (shards), heartbeat_age_seconds.
  nlohmann::json rows() const;
  const View& view() const { return view_; }

 private:
  struct Watch {
    uint64_t incarnation = 0;
    int64_t beats = -1;
    Clock::time_point last_beat{};
  };
  void publish(std::vector<nlohmann::json>& events, const std::string& why);
  void lose(int index, const std::string& cause, std::vector<nlohmann::json>& events);
  void learn_registrations(std::vector<nlohmann::json>& events);
  void check_heartbeats(std::vector<nlohmann::json>& events);
  void learn_synced();
  void hand_back(std::vector<nlohmann::json>& events);

  store::Store& store_;
  int servers_;
  std::chrono::milliseconds failure_timeout_;
  View view_;
  std::map<int, Watch> watch_;                // by server index: its current process
  std::map<int, nlohmann::json> registered_;  // before the first view
  // (shard, server index) pairs whose backup has the shard's state.
  std::set<std::pair<uint32_t, int>> synced_;
  std::vector<int> lost_;
  std::vector<nlohmann::json> pending_events_;  // from server_exited(), handed out by tick()
  std::optional<std::string> failure_;
};

}  // namespace cohort::ps
