// What a worker tells its coordinator while it trains — progress records (rank 0 of an epoch),
// events for events.jsonl, its live status — sent by a thread of its own, so that a step never
// waits on the coordinator. While the coordinator is away (it died and is being started again, or
// a standby takes over) the records wait, in order, and go once it is back; only the newest
// status is kept. A record's number (job/metrics_next, job/events_next) is taken once: a record
// is never numbered twice, so the coordinator never sees a gap it must skip for a resend.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "cohort/base/clock.h"
#include "cohort/store/store.h"

namespace cohort::elastic {

class JobReports {
 public:
  // `store`: a connection of the reports' own (a short reconnect timeout: the thread tries again
  // every `retry`).
  JobReports(std::unique_ptr<store::Store> store, int rank, Millis retry = Millis(500));
  // Stops the thread; what was not sent is dropped.
  ~JobReports();
  JobReports(const JobReports&) = delete;
  JobReports& operator=(const JobReports&) = delete;

  void progress(const nlohmann::json& record);
  void event(const nlohmann::json& event);  // gets "rank"
  void status(const nlohmann::json& status);
  // Waits until everything reported so far has been sent, up to `timeout`; whether it was.
  bool flush(Millis timeout);

  // Records kept while the coordinator is away; past this the oldest are dropped (and counted in
  // the log).
  static constexpr size_t kMaxQueued = 100000;

 private:
  struct Record {
    bool progress = true;  // else an event
    std::string text;
    long number = -1;  // taken from the counter once
  };
  void loop();
  // Sends what is queued; false when the store could not be reached.
  bool send_some(std::unique_lock<std::mutex>& lk);

  std::unique_ptr<store::Store> store_;
  int rank_;
  Millis retry_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Record> queue_;
  std::optional<std::string> status_;
  bool sending_ = false;  // the thread holds an item it took from the queue
  bool stop_ = false;
  size_t dropped_ = 0;
  std::thread thread_;
};

}  // namespace cohort::elastic
