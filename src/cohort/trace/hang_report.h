// Hang diagnosis: turns every rank's flight recorder (comm/flight_recorder.h) into a statement a
// user can act on, for example
//   rank 2 never entered allreduce #1234 (bucket 3, 6.2 MB); ranks 0, 1, 3 have waited 12.3 s;
//   rank 2 last finished #1233 and is in backward of step 411
//
// How it reasons: the stuck collective is the lowest sequence number that some rank has started
// (or gave up on) and not finished. Every rank is then one of: waiting in it; never entered it
// (its last finished collective is older and it has not started this one; its activity says
// where its training loop stands); already past it; or silent (no report: stopped, dead, or
// unreachable; the launcher says which when it can, and the rank's last published activity is
// shown). With no collective in flight, sends and recvs that wait are matched by peer and tag:
// the peer that never posted the other side is named (or, when both sides wait, the connection
// between them); with none either, the report lists what each rank is doing.
//
// Reports travel as JSON through the job's store: each worker's FlightReporter publishes its
// activity every second and answers requests for its whole record; a worker that fails writes its
// record before it exits.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cohort/comm/flight_recorder.h"
#include "cohort/store/store.h"

namespace cohort::trace {

nlohmann::json to_json(const comm::FlightSnapshot& s);
comm::FlightSnapshot snapshot_from_json(const nlohmann::json& j);  // throws on a malformed record

// What the launcher knows about a rank besides its report.
struct RankInfo {
  std::optional<comm::FlightSnapshot> report;  // absent: the rank did not answer
  std::string error;                           // the rank's own error, if it failed
  std::string note;                            // e.g. "pid 4242 is stopped (SIGSTOP or a debugger)"
  std::optional<nlohmann::json> last_activity;  // the rank's last published activity
  bool member = true;  // false: not in the job's current membership (lost, or not joined): ignored
};

struct HangDiagnosis {
  std::string headline;              // one paragraph: who is stuck where
  std::vector<std::string> details;  // one line per rank
  std::vector<int> culprits;         // ranks named as the cause
  uint64_t stuck_seq = 0;            // 0: no collective in flight
  std::string text() const;          // headline, details and every rank's ring: hang-report.txt
  std::vector<comm::FlightSnapshot> snapshots;  // the reports it was made from
};

HangDiagnosis diagnose_hang(const std::vector<RankInfo>& ranks);

// "allreduce #13 (bucket 0, 0.4 MB)".
std::string describe_record(const comm::CollectiveRecord& r);

// The store keys under a prefix (the job uses "job/debug"):
//   <prefix>/activity/<rank>  a rank's step, phase and last finished collective, every second
//   <prefix>/request/<n>      the coordinator's n-th request for every rank's record
//   <prefix>/report/<rank>    a rank's record (JSON): "request": n it answers, or "final": true

// Worker side: publishes `recorder`'s activity every `publish_every` and answers the
// coordinator's requests. Runs on a thread of its own with a store connection of its own
// (`connection`), so it answers while the training thread is stuck.
class FlightReporter {
 public:
  FlightReporter(std::unique_ptr<store::Store> connection, const std::string& prefix,
                 comm::FlightRecorder& recorder, int rank,
                 std::chrono::milliseconds publish_every = std::chrono::seconds(1));
  ~FlightReporter();
  FlightReporter(const FlightReporter&) = delete;
  FlightReporter& operator=(const FlightReporter&) = delete;

 private:
  void loop();
  std::unique_ptr<store::Store> connection_;
  std::unique_ptr<store::Store> store_;  // connection_ under the prefix
  comm::FlightRecorder& recorder_;
  int rank_;
  std::chrono::milliseconds every_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// A failing worker's last words: its record, marked final, with the error. Never throws; returns
// whether the store took them.
bool publish_final_report(store::Store& store, const std::string& prefix,
                          const comm::FlightRecorder& recorder, const std::string& error,
                          bool timed_out);

// Coordinator side.
class HangWatch {
 public:
  HangWatch(store::Store& store, const std::string& prefix, int world_size, double hang_timeout_s);

  // The job ranks of the current membership (at the start 0 .. world_size - 1): the ranks watched
  // and asked for their records. A replacement is watched once it is a member; a lost rank no
  // longer is (its stale activity and report would be blamed).
  void set_members(std::vector<int> job_ranks);

  // Reads every rank's published activity; true once when no rank has made progress (a new
  // step or a finished collective) for hang_timeout_s since every rank has published. Rearms
  // after progress.
  bool stalled();
  // Whether some rank's final report says it failed on a timeout.
  bool timeout_reported();
  // Asks every rank for its record and waits up to `wait` for the answers (a final report
  // counts as one). Fills report, error and last_activity; note is the caller's.
  std::vector<RankInfo> collect(std::chrono::milliseconds wait);

 private:
  std::unique_ptr<store::Store> store_;  // the caller's store under the prefix
  int world_;                            // one more than the highest job rank seen
  std::vector<int> members_;             // watched, in increasing order
  double timeout_s_;
  long next_request_ = 0;
  std::vector<std::string> last_seen_;
  std::chrono::steady_clock::time_point last_progress_;
  bool reported_ = false;
};

}  // namespace cohort::trace
