// The TCP communicator: a Mesh of connections plus one communication thread that runs queued
// operations in issue order, and the failure handling around them (timeouts that name the stuck
// ranks, fail-fast on a lost peer, abort). A thread that waits for an operation nobody has started
// runs it itself (Work::wait); in_flight_ keeps one operation at a time, in queue order, whichever
// thread runs it. The communication thread leaves a small operation to its waiting thread for
// CommConfig::hand_off_delay, so that a small collective waited on at once runs on its caller's
// thread with no thread wake-up on its path; a large one it starts at once, to overlap with
// whatever the caller does next. The communication thread sleeps on an Alarm: a small operation
// queued while it sleeps only sets the alarm to its hand-off time (a timer, no wake-up), so a
// caller that runs the operation itself costs that thread nothing.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "cohort/base/alarm.h"
#include "cohort/comm/algorithms.h"
#include "cohort/comm/communicator.h"
#include "cohort/comm/mesh.h"

namespace cohort::comm {

// ConfigError naming `op` for a buffer of elements without memory.
void check_buffer(const char* op, const Buffer& b);

class TcpCommunicator final : public Communicator {
 public:
  TcpCommunicator(store::Store& store, const CommConfig& config, std::unique_ptr<Mesh> mesh);
  ~TcpCommunicator() override;

  int rank() const override { return config_.rank; }
  int size() const override { return config_.size; }
  std::shared_ptr<Work> allreduce(Buffer buf, const AllreduceOptions& opts) override;
  std::shared_ptr<Work> reduce_scatter(Buffer in, Buffer out,
                                       const ReduceScatterOptions& opts) override;
  std::shared_ptr<Work> allgather(Buffer in, Buffer out, const CollectiveOptions& opts) override;
  std::shared_ptr<Work> allreduce_encoded(Buffer buf, Encoding& encoding,
                                          const EncodedAllreduceOptions& opts) override;
  std::shared_ptr<Work> allgatherv(Buffer in, GatheredBlocks* out,
                                   const CollectiveOptions& opts) override;
  std::shared_ptr<Work> broadcast(Buffer buf, const BroadcastOptions& opts) override;
  std::shared_ptr<Work> barrier(const CollectiveOptions& opts) override;
  std::shared_ptr<Work> reduce(Buffer buf, const ReduceOptions& opts) override;
  std::shared_ptr<Work> gather(Buffer in, Buffer out, const RootedOptions& opts) override;
  std::shared_ptr<Work> scatter(Buffer in, Buffer out, const RootedOptions& opts) override;
  std::shared_ptr<Work> all_to_all(Buffer in, Buffer out, const AllToAllOptions& opts) override;
  std::shared_ptr<Work> send(Buffer buf, int dst, const PointToPointOptions& opts) override;
  std::shared_ptr<Work> recv(Buffer buf, int src, const PointToPointOptions& opts) override;
  std::unique_ptr<Communicator> split(int color, int key) override;
  std::unique_ptr<Communicator> subgroup(const std::vector<int>& ranks) override;
  void abort(const std::string& reason) override;
  std::exception_ptr failure() const override;
  CommStats stats() const override;
  FlightRecorder& flight_recorder() override { return *recorder_; }
  void cut_connections() override { mesh_->shutdown_all(); }

 private:
  struct Op {
    std::shared_ptr<Work> work;
    OpId id;
    int peer = -1;  // send/recv only
    // What check_collectives compares and the flight recorder shows.
    uint64_t count = 0;
    Algorithm algorithm = Algorithm::Auto;
    int detail = 0;  // the reduction (allreduce, reduce_scatter) or the root (broadcast)
    std::chrono::milliseconds timeout{0};
    // Until then only a thread waiting on the operation runs it (CommConfig::hand_off_delay).
    Clock::time_point hand_off_at{};
    Spin spin{};                           // CommConfig::spin_wait where it applies
    std::function<void(OpContext&)> body;  // a collective's
    Message message{};                     // a send's or a recv's
    bool sends = false;
    bool prompt = false;  // AllreduceOptions::prompt
  };

  // `shape` carries count, algorithm and detail into the queued Op; `bytes` is the size of the
  // user's data (what decides the hand-off delay).
  std::shared_ptr<Work> enqueue(OpKind kind, DType dtype, size_t bytes,
                                std::chrono::milliseconds timeout,
                                std::function<void(OpContext&)> body, uint32_t tag = 0,
                                int peer = -1, const std::string& p2p_name = "",
                                const Op* shape = nullptr);
  // split() and subgroup(): `agreement` is what every rank must have passed alike (a digest of
  // subgroup()'s list; 0 for split()).
  std::unique_ptr<Communicator> form_group(const char* what, int color, int key,
                                           uint64_t agreement);
  // check_collectives: exchanges op's fingerprint with every peer; CollectiveMismatchError.
  void check_fingerprint(OpContext& ctx, const Op& op);
  class Runner;
  void loop();
  // Runs queued operations up to and including `work` on the calling thread, unless one is in
  // flight, `work` is no longer queued, or they might not end within `limit`.
  void run_until(const Work& work, std::chrono::milliseconds limit);
  // Runs `op`, or fails it with `fatal` (the communicator's error when it was taken from the queue,
  // if any).
  void execute(Op& op, const std::exception_ptr& fatal);
  // A send or a recv (tcp_p2p.cc): while it waits, the first queued one of the other direction
  // runs beside it.
  void execute_message(Op& op);
  // Moves that op out of the queue into `other`; false when there is none.
  bool take_partner(const Op& op, Op& other);
  OpContext context(const Op& op, Deadline deadline);
  // Turns the raw error of a failed operation into the error the user sees, and makes the
  // communicator fail-stop: records it for every later operation, tells the other ranks through
  // the store, and shuts every connection down so that they fail fast too.
  std::exception_ptr fail(const Op& op, std::exception_ptr raw);
  std::exception_ptr timed_out(const Op& op, const StallError& stall);
  std::exception_ptr peer_lost(const Op& op, const PeerLostError& lost);
  std::string what_of(const Op& op) const;
  std::string key(const std::string& suffix) const { return config_.store_prefix + "/" + suffix; }

  store::Store& store_;
  const CommConfig config_;
  std::unique_ptr<Mesh> mesh_;
  Counters counters_;
  std::vector<uint8_t> scratch_;  // the thread running the operation in flight only
  std::atomic<uint64_t> collectives_{0};
  std::shared_ptr<FlightRecorder> recorder_;

  mutable std::mutex mu_;
  Alarm alarm_;  // the communication thread sleeps on it
  std::deque<Op> queue_;
  bool stop_ = false;
  bool in_flight_ = false;
  bool sleeping_ = false;  // the communication thread sleeps on alarm_
  bool aborted_ = false;
  std::string abort_reason_;
  std::exception_ptr fatal_;  // set once: every later operation fails with it
  uint64_t next_seq_ = 1;
  uint64_t next_p2p_ = 1;
  std::shared_ptr<Runner> runner_;  // handed to every Work; outlives this communicator
  Clock::duration hand_off_delay_;  // now (CommConfig::hand_off_delay adapts); under mu_
  const Clock::duration hand_off_delay_max_;
  // spin_wait, or 0 where this host has fewer CPUs than ranks: every wait of a small operation
  // spins this long, and every wait of a large one on a shared-memory pair.
  const std::chrono::nanoseconds spin_;
  const WorldShape shape_;  // what Auto weighs besides the size
  std::thread thread_;
};

}  // namespace cohort::comm
