// The worker's side of the membership protocol (coordinator.h describes it): heartbeats, joining,
// leaving a failed epoch and meeting again at the next, and the communicator of each epoch.
//
// A background thread, on its own store connection, adds to job/heartbeat/<rank> every heartbeat
// interval and watches for the coordinator's request for the next epoch. An "abort" request
// aborts the current communicator at once, so a rank blocked in a collective with a lost peer is
// released within moments instead of at the collective's deadline; a "grow" request is only noted
// (change_requested()) and the trainer switches at its next snapshot boundary.
//
// A worker whose coordinator is out of reach (it died, it is being started again, or a partition
// separates them) trains on: its collectives need only its peers. It waits for a coordinator to
// return up to coordinator_wait (elastic.coordinator_wait_s): none of its heartbeats got through
// for that long (with an etcd store: job/coordinator held by nobody that long), it fences itself —
// it aborts its communicator and join()/rejoin() throw ExcludedError. When its heartbeats get
// through again it looks first whether the job declared it lost meanwhile (its peers went on
// without it): then it fences itself at once. An isolated worker never goes on training on its
// own: its peers abort the communicator it shares with them when the coordinator asks them to.
// A job that ended (job/ended) fences its workers too; each says it left (job/left/<rank>).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cohort/base/clock.h"
#include "cohort/base/error.h"
#include "cohort/comm/communicator.h"
#include "cohort/elastic/process.h"
#include "cohort/net/socket.h"
#include "cohort/store/store.h"

namespace cohort::elastic {

// This worker is not a member of the job any more (it was declared lost, e.g. after being stopped
// longer than the failure timeout). It must exit without touching the job's state.
class ExcludedError : public Error {
 public:
  using Error::Error;
};

struct Membership {
  int epoch = 0;
  std::vector<int> members;  // job ranks; the communicator rank is the index
  // Communicator rank of job rank `rank`, or -1.
  int rank_of(int rank) const;
  static Membership parse(const std::string& json_text);
};

struct AgentOptions {
  std::string store;  // where the job's store is (store/connect.h)
  std::string token;
  int rank = 0;  // this worker's rank in the job (stable across epochs)
  std::chrono::milliseconds heartbeat{1000};
  // How long a worker waits for a membership that includes it before giving up.
  std::chrono::milliseconds join_timeout{60000};
  // No coordinator seen for this long: the worker is cut off and fences itself (0: never).
  std::chrono::milliseconds coordinator_wait{0};
  // With an etcd store: this worker stands by. When the job has had no coordinator for a second
  // or two (its lease ran out and no `cohort run --standby` took the lead), one worker — the one
  // whose claim on job/standby_claim goes through — starts `cohort run --standby` with its run
  // directory standby-r<rank>-<time> inside this one. Empty: it does not.
  std::string standby_dir;
  // Template of every epoch's communicator (rank, size and store_prefix are filled in).
  comm::CommConfig comm;
};

class WorkerAgent {
 public:
  // `store` is the worker's main store connection (the communicators use it); the heartbeat
  // thread opens its own.
  WorkerAgent(store::Store& store, AgentOptions options);
  ~WorkerAgent();
  WorkerAgent(const WorkerAgent&) = delete;
  WorkerAgent& operator=(const WorkerAgent&) = delete;

  int rank() const { return options_.rank; }

  // The first membership this worker belongs to: the current one if it lists this rank (the
  // workers of the start), otherwise this worker announces itself as a joiner (job/waiting) and
  // waits to be admitted, as long as the job goes on (the members admit it at their next commit).
  // Throws Error if the job was abandoned, ExcludedError once it ended or this worker is cut off.
  Membership join();
  // After the current epoch failed (or a change was agreed): tells the coordinator this worker is
  // ready for the next epoch (`info` goes into job/ready) and waits for that epoch's membership.
  // Throws ExcludedError if it does not list this worker.
  Membership rejoin(const Membership& current, const nlohmann::json& info);

  // Builds the communicator of `m` (this worker must be a member) and watches it: an abort request
  // for the next epoch aborts it. Valid until disconnect(). `timeout` replaces the template's
  // collective deadline when it is not zero.
  comm::Communicator& connect(const Membership& m,
                              std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  // The communicator connect() built, shared: whoever holds it keeps it (aborted, once
  // disconnect() gave a reason) after disconnect(). Null when not connected.
  std::shared_ptr<comm::Communicator> communicator();
  // Aborts (if `reason` is not empty) and lets go of the current communicator.
  void disconnect(const std::string& reason);

  // Whether the coordinator asked for an epoch after the connected one.
  bool change_requested() const { return requested_.load() > connected_epoch_.load(); }
  // Whether this worker fenced itself (no coordinator for coordinator_wait, declared lost, or the
  // job ended).
  bool cut_off() const { return cut_off_.load(); }
  // Whether the coordinator has not been heard from for two heartbeats (gone, or out of reach).
  bool coordinator_away() const;
  // Writes `key` to the job's store, waiting through the coordinator's absence: it retries until
  // the write goes through or this worker is cut off (then ExcludedError).
  void post(const std::string& key, const store::Bytes& value);
  // A worker that finished while the job has no coordinator (etcd: its lease ran out) stays, up
  // to `limit`, until one leads again to collect the summaries — a standby this worker may start
  // itself (standby_dir).
  void wait_for_a_coordinator(Millis limit);
  // Rank 0 of an epoch after a failure: the first step there is done (for recovery_seconds).
  void report_recovered(const Membership& m, const nlohmann::json& info);

 private:
  Membership wait_membership(int epoch, Clock::time_point deadline);
  void throw_if_cut_off() const;
  void heartbeat_loop();
  // One round of the heartbeat thread: a heartbeat when one is due (and what it may learn: that
  // the job declared this worker lost, or ended), then a watch for the next epoch's request.
  void beat(store::Store& store, Clock::time_point& next_beat);
  void fence(const std::string& why);
  // The heartbeat thread, when the job has no coordinator (etcd): starts a standby if it is this
  // worker's turn (AgentOptions::standby_dir).
  void stand_by(store::Store& store);

  store::Store& store_;
  AgentOptions options_;
  std::atomic<int> connected_epoch_{-1};
  std::atomic<int> requested_{-1};
  std::atomic<bool> cut_off_{false};
  std::atomic<Clock::rep> coordinator_seen_{Clock::now().time_since_epoch().count()};
  std::string cut_off_reason_;  // written once before cut_off_ is set

  std::mutex comm_mu_;  // guards comm_ and setup_cancel_ against the heartbeat thread's abort
  std::shared_ptr<comm::Communicator> comm_;
  // While connect() sets a communicator up: set to make the setup give up (CommConfig).
  std::shared_ptr<std::atomic<bool>> setup_cancel_;

  // The heartbeat thread's: since when the job has had no coordinator, and the standby started.
  std::optional<Clock::time_point> leaderless_since_;
  std::optional<ChildProcess> standby_;

  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace cohort::elastic
