// FlightRecorder: always on, a bounded ring of this rank's most recent collectives and what the
// rank is doing right now, so that a hang can be explained after the fact (which rank never
// entered which collective, and where in its step it stands).
//
// The communicator records every collective as it is queued, started and finished (sequence
// number, operation, element type, count, algorithm, times). The trainer tells the recorder its
// step and phase (data, forward, backward, optimizer, ...) through set_activity(), two relaxed
// atomic stores. A caller may attach a short label to a collective (DDP: "bucket 3"). A snapshot
// copies the ring under its lock; the communication thread holds that lock for a few stores per
// collective, so recording costs well under a microsecond per operation. Sends and recvs posted
// and not completed are kept too (they have no shared sequence number; see MessageRecord).
//
// Besides the ring, the recorder keeps a latency histogram per kind of operation (started to
// finished, successful ones), cumulative over the process's life: the console's Prometheus
// endpoint publishes them (cohort_collective_latency_seconds).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "cohort/base/clock.h"
#include "cohort/base/dtype.h"
#include "cohort/base/histogram.h"
#include "cohort/comm/types.h"
#include "cohort/comm/wire.h"
#include "cohort/comm/work.h"

namespace cohort::comm {

enum class CollectiveState : uint8_t { Queued = 0, Started = 1, Done = 2, Failed = 3 };
std::string_view collective_state_name(CollectiveState s);  // "queued" | "started" | ...

// What the training loop is doing; set by the trainer at each transition.
enum class Phase : uint8_t {
  Setup = 0,
  Data = 1,
  Forward = 2,
  Backward = 3,
  Optimizer = 4,
  Checkpoint = 5,
  Evaluate = 6,
  Done = 7,
  Training = 8,   // somewhere in a step of a loop that only reports its step boundaries (Python)
  Averaging = 9,  // local SGD averaging the replicas' models
  Exchange = 10,  // pushing gradients to the parameter servers and pulling the parameters
};
std::string_view phase_name(Phase p);   // "setup" | "data" | "forward" | ... | "averaging"
Phase parse_phase(std::string_view s);  // Setup for anything unknown

// One collective as the recorder saw it. Times are microseconds since the Unix epoch (0: not
// reached), so that records of ranks on one machine compare directly.
struct CollectiveRecord {
  uint64_t seq = 0;
  OpKind kind = OpKind::Allreduce;
  DType dtype = DType::F32;
  uint64_t count = 0;
  Algorithm algorithm = Algorithm::Auto;  // allreduce only
  CollectiveState state = CollectiveState::Queued;
  int64_t queued_us = 0;
  int64_t started_us = 0;
  int64_t finished_us = 0;
  std::string label;  // e.g. "bucket 3"; empty if the caller gave none
  // Where the time went, once finished: blocked waiting for peers (in poll) and reducing; the
  // rest of finished - started is moving bytes. Bytes this rank sent; bit r of peers: it
  // exchanged data with rank r (ranks >= 63 share bit 63).
  int64_t wait_us = 0;
  int64_t reduce_us = 0;
  uint64_t sent_bytes = 0;
  uint64_t peers = 0;

  uint64_t bytes() const { return count * dtype_size(dtype); }
};

// A send or recv posted and not completed yet. Point-to-point operations have no sequence number
// that the ranks share: a hang report matches them by peer and tag.
struct MessageRecord {
  uint64_t id = 0;  // this rank's count of its sends and recvs, from 1
  bool sends = false;
  int peer = -1;
  uint32_t tag = 0;
  DType dtype = DType::F32;
  uint64_t count = 0;
  int64_t posted_us = 0;

  uint64_t bytes() const { return count * dtype_size(dtype); }
};

struct Activity {
  int64_t step = -1;  // the step the phase is part of, the one in progress (-1: before training)
  Phase phase = Phase::Setup;
  int64_t since_us = 0;  // when the phase began
};

struct FlightSnapshot {
  int rank = 0;
  int64_t taken_us = 0;
  Activity activity;
  std::vector<CollectiveRecord> records;  // oldest first, at most capacity()
  std::vector<MessageRecord> messages;    // in flight, oldest first, at most capacity()
};

// Running totals over every collective that finished successfully: the step breakdown and
// `cohort diagnose` take differences of two readings to measure what went on between them.
struct CollectiveTotals {
  uint64_t collectives = 0;
  uint64_t sent_bytes = 0;  // what this rank put on the wire
  int64_t active_us = 0;    // sum of finished - started
  int64_t wait_us = 0;      // of which blocked waiting for peers
};

// Microseconds since the Unix epoch (plus COHORT_CLOCK_SKEW_US if set: a test hook).
int64_t now_us();

// Accounting of the operation the calling thread is running, kept by exchange() and reduce().
struct OpTiming {
  int64_t wait_ns = 0;
  int64_t reduce_ns = 0;
  uint64_t peers = 0;
  // Whether reductions are timed: not for a collective of a few KiB, whose reductions take about
  // as long as the two clock reads that would time them (in a trace, their time shows in the
  // collective's remainder).
  bool time_reductions = true;
  static constexpr size_t kTimedBytes = 4096;
};
// Set by the communicator around each operation on the thread that runs it; null otherwise.
inline thread_local OpTiming* t_op_timing = nullptr;

// Told about every collective as it finishes (on the thread that ran it): the timeline.
class CollectiveObserver {
 public:
  virtual ~CollectiveObserver() = default;
  virtual void on_collective(const CollectiveRecord& r) = 0;
};

class FlightRecorder {
 public:
  explicit FlightRecorder(int rank, size_t capacity = 256);

  size_t capacity() const { return ring_.size(); }
  // Forgets every record (a new communicator begins at sequence number 1). The rank it was made
  // with (the worker's rank in the job) and the activity are kept.
  void restart();

  // The communicator's hooks. on_queued takes the record's seq; the others find it by seq (a
  // record that has already left the ring is ignored).
  // `at`: when it was queued / started, on the steady clock, where the caller has just read it
  // (a clock read costs tens of nanoseconds, a fair share of a small collective); now otherwise.
  void on_queued(const CollectiveRecord& r, Clock::time_point at = {});
  void on_started(uint64_t seq, Algorithm algorithm, Clock::time_point at = {});
  void on_finished(uint64_t seq, bool ok, const OpTiming* timing = nullptr,
                   uint64_t sent_bytes = 0);
  void set_label(uint64_t seq, std::string label);
  // A send or recv posted; it is in flight until `work` completes (or is gone).
  void on_message_posted(const MessageRecord& r, std::weak_ptr<const Work> work);
  // The highest sequence number queued so far (0: none).
  uint64_t newest() const;

  // The trainer's hook: cheap enough for every phase change.
  void set_activity(int64_t step, Phase phase) {
    since_us_.store(now_us(), std::memory_order_relaxed);
    step_.store(step, std::memory_order_relaxed);
    phase_.store(static_cast<uint8_t>(phase), std::memory_order_relaxed);
  }
  Activity activity() const;
  // The highest sequence number finished (successfully) so far.
  uint64_t last_done() const { return last_done_.load(std::memory_order_relaxed); }

  FlightSnapshot snapshot() const;
  CollectiveTotals totals() const;

  // Latency of every successful operation of each kind so far (started to finished), kept across
  // restart(). Kinds that never ran are left out.
  struct KindLatency {
    OpKind kind;
    LatencyHistogram histogram;
  };
  std::vector<KindLatency> latencies() const;

  // The observer must outlive its registration; set nullptr before it goes away.
  void set_observer(CollectiveObserver* o) { observer_.store(o, std::memory_order_release); }

 private:
  CollectiveRecord* find(uint64_t seq);  // under mu_
  // A record's (and a snapshot's) time on now_us()'s clock from a steady-clock time (now when
  // `at` is unset): the steady time plus the two clocks' difference, measured again once kResyncNs
  // have passed since it was last measured. The steady clock runs at the wall clock's rate (NTP's
  // slewing included) but does not follow it when it is set: records follow such a step of more
  // than kStepNs within kResyncNs.
  int64_t wall_us(Clock::time_point at) const;
  // adopt: take the difference measured whatever it is (otherwise only a step).
  void resync_wall(bool adopt) const;
  static constexpr int64_t kResyncNs = 10'000'000;
  static constexpr int64_t kResyncSpreadNs = 20'000;
  static constexpr int64_t kStepNs = 1'000'000;
  // Messages still in flight (under mu_; a Work's lock is taken inside it, never the reverse).
  std::vector<MessageRecord> messages_in_flight() const;

  const int rank_;
  mutable std::mutex mu_;
  std::vector<CollectiveRecord> ring_;  // slot seq % capacity
  static constexpr size_t kKinds = static_cast<size_t>(kLastOpKind) + 1;  // OpKind is 1..last
  std::array<LatencyHistogram, kKinds> latency_{};
  uint64_t newest_ = 0;  // highest seq recorded
  struct Posted {
    MessageRecord record;
    std::weak_ptr<const Work> work;
  };
  std::vector<Posted> messages_;  // completed ones are dropped when it has grown to prune_at_
  size_t prune_at_ = 64;
  CollectiveTotals totals_;
  std::atomic<int64_t> step_{-1};
  std::atomic<uint8_t> phase_{0};
  std::atomic<int64_t> since_us_{0};
  std::atomic<uint64_t> last_done_{0};
  std::atomic<CollectiveObserver*> observer_{nullptr};
  mutable std::atomic<int64_t> wall_minus_steady_ns_{0};
  mutable std::atomic<int64_t> synced_ns_{0};  // the steady time of the last resync_wall()
};

}  // namespace cohort::comm
