// The coordinator of one job: hosts the rendezvous store, publishes the job, collects what the
// workers report (progress records, final summaries, failures), and owns the membership: it
// watches every worker's heartbeat, decides who is lost, and publishes membership epochs. It runs
// inside `cohort run` (the embedded default) or as `cohort coordinator` when workers are started by
// a cluster's launcher.
//
// Membership protocol (keys in job_protocol.h). Epoch 0 is [0, world_size). A change to epoch e+1
// starts with job/request/<e+1>:
//   "abort"  a member was lost (its process exited, its heartbeat stopped, or a survivor's
//            collective failed): every member aborts its communicator at once and reports ready;
//   "grow"   a joiner waits: members switch at their next snapshot boundary, losing no step.
// When every member that is not lost has reported ready, the coordinator publishes
// job/membership/<e+1>: the survivors in their old order, then the joiners (up to max_workers).
// A member that does not report ready within failure_timeout of an abort request is lost too.
// Below min_workers the coordinator waits for joiners up to join_timeout, then gives up
// (job/abandoned) with a message that says why.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cohort/base/clock.h"
#include "cohort/net/socket.h"
#include "cohort/store/tcp_store.h"

namespace cohort::elastic {

struct MembershipPolicy {
  int min_workers = 1;
  int max_workers = 1;
  std::chrono::milliseconds failure_timeout{10000};
  std::chrono::milliseconds join_timeout{60000};
  std::chrono::milliseconds heartbeat{1000};  // the workers' heartbeat interval
};

struct CoordinatorOptions {
  // The job's store: empty, a StoreServer embedded here (bind_host, port, token); or an etcd
  // address (store/etcd_store.h) whose prefix is this job's alone.
  std::string store;
  // With an etcd store: wait until the job's coordinator is gone, then take the job over from
  // what the store holds (a standby coordinator; leadership.h).
  bool standby = false;
  std::string bind_host = "127.0.0.1";
  uint16_t port = 0;
  std::string token;
  int world_size = 1;
  // Ranks the job admits: [0, rank_limit) (the workers, then their replacements); at least
  // world_size.
  int rank_limit = 0;
  std::string config_yaml;  // resolved job file
  std::string run_dir;
  std::string resume_from;  // checkpoint path or empty
  MembershipPolicy membership;
  // The embedded store's journal (store/journal.h), so that a coordinator started again over the
  // same run directory finds the job's keys. Empty: none.
  std::string journal;
  // The journal holds a job whose coordinator died: serve its keys where that one listened (port)
  // and take the job over, with the workers that still run, instead of publishing a new one.
  // `predecessor` says which coordinator that was (for the log and summary.json).
  bool readopt = false;
  std::string predecessor;
};

// Outcome of the recoveries so far (summary.json fields).
struct RecoveryStats {
  int recoveries = 0;               // membership changes after a lost worker that trained again
  double recovery_seconds_max = 0;  // failure to the first completed step afterwards
  long steps_rolled_back = 0;       // steps trained again after restoring a snapshot
};

class Leadership;

class Coordinator {
 public:
  explicit Coordinator(const CoordinatorOptions& options);
  ~Coordinator();
  // Once the job is over: tells the workers still connected to leave (job/ended: `status`) and
  // waits, up to two heartbeats and a second, for those its launcher did not start to say they
  // have (the launcher stops its own).
  void end_job(const std::string& status);
  // Then: removes the job's keys from an etcd store, or stops the embedded store and removes its
  // journal.
  void forget_job();
  // A standby that took over: the coordinator it replaced ("" when this one started the job),
  // and whether the job had ended before it could (then there is nothing to coordinate).
  const std::string& took_over_from() const { return took_over_from_; }
  bool job_ended() const { return job_ended_; }
  // A coordinator that took a job over: seconds from its predecessor's last sign of life (a write
  // it makes a few times per failure_timeout) to this one leading; -1 otherwise.
  double takeover_seconds() const { return takeover_seconds_; }
  // Whether this coordinator still leads the job (always, with the embedded store). One that lost
  // the lead (its etcd lease expired) must leave the job, its workers and its keys alone.
  bool leads() const;

  // Where the embedded store listens (an etcd-kept job has none: throws Error).
  net::Endpoint endpoint() const;
  // What workers are told to join: the embedded store's HOST:PORT, reached at `host` when it
  // listens on every address, or the etcd address.
  std::string join_address(const std::string& host) const;
  int world_size() const { return options_.world_size; }

  // New progress records since the last call, in order.
  std::vector<nlohmann::json> poll_metrics();
  // New events the workers reported (job/events/<i>) since the last call, in order.
  std::vector<nlohmann::json> poll_worker_events();
  // Ranks that have joined so far.
  int joined_count();
  // A coordinator that took a job over: whether any member's heartbeat has come since it did
  // (its workers still run).
  bool heard_from_members();
  // The members that joined from this machine (host_name()), by rank: their pids, for a launcher
  // that must stop workers it did not start.
  std::map<int, pid_t> members_on_this_host() const;
  // The final summaries (in communicator rank order) once every member of the current epoch has
  // posted one and no membership change is under way.
  std::optional<std::vector<nlohmann::json>> summaries();
  // The first fatal error a worker reported, if any: (rank, message).
  std::optional<std::pair<int, std::string>> failure();

  // --- membership (the launcher's loop calls these; not thread-safe) ---
  // A worker process the launcher started (its rank in the job and its pid).
  void worker_started(int rank, pid_t pid);
  // A worker process exited. A member that exits with an error is lost (cause: the exit status);
  // a worker that was already lost or excluded is only noted.
  void worker_exited(int rank, bool ok, const std::string& status);
  // Whether the launcher will still start replacements; when not, falling below min_workers ends
  // the job at once instead of after join_timeout.
  void expect_joiners(bool expect) { expect_joiners_ = expect; }
  // Checks heartbeats, ready reports and joiners; advances the membership. Returns the events
  // (worker_lost, membership_changed, recovered, ...) for events.jsonl, in order.
  std::vector<nlohmann::json> tick();
  // Ranks declared lost since the last call (the launcher may start replacements).
  std::vector<int> take_lost();
  // Why the job cannot continue, once the coordinator gave up on it.
  std::optional<std::string> abandoned() const { return abandoned_; }
  // Whether a change of membership is under way (requested, not yet published).
  bool changing() const { return change_.has_value(); }
  int epoch() const { return epoch_; }
  const std::vector<int>& members() const { return members_; }
  const RecoveryStats& recovery_stats() const { return stats_; }
  // Whether `rank` was declared lost (or excluded).
  bool is_lost(int rank) const { return lost_.count(rank) != 0; }

 private:
  struct Worker {
    pid_t pid = 0;
    std::string host;
    bool joined = false;
    int64_t beats = -1;
    Clock::time_point last_beat{};
    bool exited = false;
    bool started_here = false;  // by this coordinator's launcher (which stops it)
  };
  // Records key(next), key(next + 1), ... as they appear, skipping a number taken by a worker that
  // was lost before it wrote the record.
  std::vector<nlohmann::json> poll_records(std::string (*key)(long), long& next);
  // The state a standby takes over: membership, lost ranks, cursors, recoveries so far.
  void adopt();
  void adopt_state();
  // Whether the job's state must be kept in the store for a coordinator that takes over (etcd, or
  // the embedded store's journal).
  bool keeps_state() const { return leadership_ || !options_.journal.empty(); }
  void fence();
  void save_cursors();
  void learn_joins();
  void check_heartbeats(std::vector<nlohmann::json>& events);
  void lose(int rank, const std::string& cause, std::vector<nlohmann::json>& events,
            Clock::time_point failed_at);
  void request_change(bool abort, const std::string& reason, std::vector<nlohmann::json>& events);
  void advance_change(std::vector<nlohmann::json>& events);
  void check_recovered(std::vector<nlohmann::json>& events);
  void abandon(const std::string& why, std::vector<nlohmann::json>& events);
  std::vector<int> waiting_joiners();
  // The cause of a lost connection that the survivors recorded against `rank`, if any.
  std::string comm_record_against(int rank);
  nlohmann::json worker_json(int rank) const;

  CoordinatorOptions options_;
  std::unique_ptr<store::StoreServer> server_;
  std::unique_ptr<store::Store> client_;
  std::unique_ptr<Leadership> leadership_;  // an etcd store's: which coordinator leads
  std::string took_over_from_;
  bool job_ended_ = false;
  long next_metric_ = 0;
  long next_event_ = 0;

  std::map<int, Worker> workers_;
  int known_ranks_ = 0;  // ranks [0, known_ranks_) may exist
  std::map<int, int64_t> adopted_beats_;  // each member's heartbeat count when taken over
  double takeover_seconds_ = -1;
  Clock::time_point next_sign_of_life_{};  // when to write job/leader_seen next
  int epoch_ = 0;
  std::vector<int> members_;
  std::set<int> lost_;
  std::vector<int> newly_lost_;
  std::vector<nlohmann::json> pending_events_;  // from worker_exited(), handed out by tick()
  bool expect_joiners_ = true;
  std::optional<std::string> abandoned_;
  // The change to epoch_ + 1 under way, if any.
  struct Change {
    bool abort = false;
    Clock::time_point requested{};
    std::optional<Clock::time_point> below_min_since;
  };
  std::optional<Change> change_;
  // The earliest failure not yet recovered from, and the epoch after which to measure.
  std::optional<Clock::time_point> failure_at_;
  int measure_epoch_ = -1;
  RecoveryStats stats_;
};

}  // namespace cohort::elastic
