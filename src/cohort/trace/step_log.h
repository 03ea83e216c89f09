// StepLog: where each training step of a rank went, one JSON line per step in
// <run_dir>/steps/rank-N.jsonl, for stragglers (trace/straggler.h) and `cohort diagnose`.
//
// A step is split into data loading, computing (forward, backward, optimizer, minus the time
// blocked on gradient exchange) and sync: the time the rank sat blocked on the gradient
// allreduces after backward. Sync is split again afterwards, across ranks: the part before the
// last rank's gradients were ready is waiting for peers, the rest is communication (diagnosis.h).
// For that every record carries ready_us, the moment this rank's gradients were all in.
//
// Off the hot path: append() copies a small struct into a buffer under a mutex; a writer thread
// renders and appends the buffer to the file about once a second, and at the end. The first line
// of a file is the rank's header (type "rank": its transport probe and clock offset).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace cohort::trace {

struct StepRecord {
  int64_t step = 0;    // 1-based: the step this record completes
  int epoch = 0;       // membership epoch
  int world = 1;       // ranks in that epoch
  int64_t end_us = 0;  // wall clock (this rank's) when the step ended
  double data_s = 0;
  double compute_s = 0;
  double sync_s = 0;               // blocked on the gradient allreduces after backward
  int64_t ready_us = 0;            // wall clock when this rank's gradients were all ready
  uint64_t sent_bytes = 0;         // bytes this rank's collectives of the step sent
  int64_t collective_us = 0;       // their summed duration (started to finished)
  int64_t collective_wait_us = 0;  // of which blocked waiting for peers' bytes
  // Self-paced modes (ssp, async): how many clocks the parameters this step used lagged its own
  // (the step's clock minus the slowest worker's clock they held); -1 in the other modes.
  int64_t staleness = -1;
  double busy_s() const { return data_s + compute_s; }
  double step_s() const { return data_s + compute_s + sync_s; }
};

nlohmann::json to_json(const StepRecord& r);
StepRecord step_from_json(const nlohmann::json& j);  // throws nlohmann's errors on a bad record

// A rank's header: its transport probe (an allreduce of `probe_bytes` timed at start-up) and
// its clock offset to rank 0 (add to its times to get rank 0's clock).
struct RankHeader {
  int rank = 0;
  int world = 1;
  int64_t clock_offset_us = 0;
  uint64_t probe_bytes = 0;  // 0: no probe
  int probe_iterations = 0;
  double probe_seconds = 0;     // per allreduce (the fastest of the iterations)
  double probe_busbw_gbps = 0;  // nccl-tests' bus bandwidth: bytes * 2(n-1)/n / time
  std::string algorithm;
};

nlohmann::json to_json(const RankHeader& h);
RankHeader header_from_json(const nlohmann::json& j);

class StepLog {
 public:
  explicit StepLog(const std::string& path);  // creates the directory; throws if it cannot open
  ~StepLog();                                 // writes what is left
  StepLog(const StepLog&) = delete;
  StepLog& operator=(const StepLog&) = delete;

  void header(const RankHeader& h);
  void append(const StepRecord& r);

 private:
  void writer();
  void write(const std::vector<nlohmann::json>& lines);

  std::ofstream out_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<StepRecord> pending_;
  std::vector<RankHeader> headers_;
  bool stop_ = false;
  std::thread thread_;
};

// One rank's file, read back. Lines that do not parse (a file cut off mid-line by a crash) are
// skipped and counted.
struct RankSteps {
  int rank = 0;
  bool has_header = false;
  RankHeader header;
  std::vector<StepRecord> steps;
  size_t bad_lines = 0;
};
RankSteps read_step_log(const std::string& path, int rank);
// N of a file named "rank-N<suffix>" (rank-3.jsonl, rank-3.log); nullopt for any other name.
std::optional<int> rank_of_file(std::string_view name, std::string_view suffix);

// Every <run_dir>/steps/rank-N.jsonl, by rank.
std::vector<RankSteps> read_step_logs(const std::string& run_dir);

}  // namespace cohort::trace
