// Tracer: the optional timeline of one rank (trace: {enabled: true}), written as Chrome trace
// JSON that Perfetto and chrome://tracing open.
//
// What it records: the training loop's phases (data, forward, backward, optimizer, checkpoint,
// evaluate) as spans on the "training" track; each gradient bucket becoming ready as an instant;
// each collective as a span on the "communication" track with its algorithm, bytes, peers and the
// split of its time into waiting for peers, reducing and moving bytes (from the flight recorder,
// which the Tracer observes).
//
// Off the hot path: recording appends a small struct to a buffer under a mutex (a few hundred
// nanoseconds); a writer thread renders and writes the buffer every 200 ms. The buffer is bounded
// (max_pending events): when the writer falls that far behind, new events are dropped and counted,
// and the count is written at the end. A rank's file is complete JSON once the Tracer is destroyed;
// `cohort trace merge` also reads the file of a rank that died mid-run.
//
// File: {"otherData": {"rank": R, "clock_offset_us": X, ...}, "traceEvents": [...]}. Times are
// this rank's wall clock in microseconds; adding clock_offset_us gives rank 0's clock (measured at
// rendezvous by measure_clock_offset).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cohort/comm/communicator.h"
#include "cohort/comm/flight_recorder.h"

namespace cohort::trace {

struct TracerOptions {
  std::string path;  // the rank's trace file
  int rank = 0;
  size_t max_pending = 1 << 20;  // events buffered before the writer takes them
  int64_t clock_offset_us = 0;   // this rank's clock + offset = rank 0's clock
};

class Tracer final : public comm::CollectiveObserver {
 public:
  explicit Tracer(const TracerOptions& options);
  ~Tracer() override;  // writes what is left and closes the file
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // Ends the current phase span and begins `phase` of `step` (1-based; 0 before training).
  void phase(int64_t step, comm::Phase phase);
  // A moment on the training track, e.g. "bucket 2 ready" with its bytes.
  void instant(std::string name, uint64_t bytes);
  void on_collective(const comm::CollectiveRecord& r) override;

  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

 private:
  struct Event {
    char ph = 'X';  // 'X' complete span, 'i' instant
    int tid = 0;    // 0 training, 1 communication
    int64_t ts_us = 0;
    int64_t dur_us = 0;
    std::string name;
    std::string cat;
    std::string args;  // rendered JSON object, or empty
  };
  void push(Event e);
  void writer();
  void write_events(const std::vector<Event>& events);

  TracerOptions options_;
  std::ofstream out_;
  bool first_ = true;  // writer thread only: no comma before the first event

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Event> pending_;
  bool stop_ = false;
  std::atomic<uint64_t> dropped_{0};

  // The open phase (training thread only).
  comm::Phase phase_ = comm::Phase::Setup;
  int64_t phase_step_ = 0;
  int64_t phase_start_us_ = 0;

  std::thread thread_;
};

// Rank r's clock offset to rank 0 (add it to r's timestamps to get rank 0's clock), measured with
// `rounds` ping-pongs over the communicator keeping the one with the shortest round trip (the
// offset is then within half that round trip). Every rank must call it; rank 0 returns 0.
int64_t measure_clock_offset(comm::Communicator& comm, int rounds = 8);

// `cohort trace merge`: reads <run_dir>/trace/rank-*.json, shifts every rank onto rank 0's clock,
// and writes <run_dir>/trace.json with one process per rank. Returns the number of ranks merged.
// Throws Error if there is nothing to merge or a file cannot be read.
int merge_traces(const std::string& run_dir);

}  // namespace cohort::trace
