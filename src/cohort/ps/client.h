// A worker's side of the parameter servers: push(keys, values) and pull(keys), ps-lite's
// KVWorker in Cohort's terms. Every call returns a comm::Work at once (the same handle as a
// collective's) and runs on the client's own thread; wait() rethrows its error.
//
// A call goes to every shard its keys touch, at the shard's primary in the newest view (view.h),
// all shards at once. A primary that is gone (its connection lost, or it answers that it no
// longer serves the shard) is looked up again in the next view, and the request sent to the new
// primary: a push the old one had taken is a duplicate there and counts once (shard.h). Every
// call has a deadline (ClientOptions::timeout); the error names the server, its address, the
// shard, the operation and this worker's slot and clock.
//
// The caller's buffers (values, out) must stay alive and untouched until the call's Work has
// completed.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "cohort/comm/work.h"
#include "cohort/ps/layout.h"
#include "cohort/ps/protocol.h"
#include "cohort/ps/shard.h"
#include "cohort/ps/view.h"

namespace cohort::ps {

struct ClientOptions {
  std::string store;  // the job's store (store/connect.h)
  std::string token;
  std::string name = "worker";  // who this client is, in errors ("rank 3")
  uint32_t slot = kNoSlot;      // this worker's slot (pushes and reads are counted by it)
  std::chrono::milliseconds timeout{30000};  // each call's deadline
};

struct PushPullOptions {
  int64_t clock = 0;        // push: this slot's clock (its pushes numbered 0, 1, 2, ...)
  double lr = 0;            // push: the learning rate of this clock's step
  int64_t min_version = 0;  // pull: answered once every shard has reached this version (ssp)
  int64_t min_clock = 0;    // pull: ... and every slot has pushed every clock below this
  // pull: answered after this long even if not reached (PullInfo::reached false); 0: no limit
  std::chrono::milliseconds wait{0};
  // push_pull: once min_version is reached, wait up to this long more for the pushed clock
  // itself to be applied (Request::fresh_ms)
  std::chrono::milliseconds fresh{0};
  SampleCounts counts{};  // push: the samples this clock's step trained
};

// What a pull saw, over the shards it touched.
struct PullInfo {
  int64_t version = 0;    // the lowest shard version
  int64_t min_clock = 0;  // the lowest clock any slot will push next
  bool stopped = false;   // a worker stopped the job (control kStop)
  int duplicates = 0;     // shards that had this push already (a resend after a failover)
  // How long the answer waited while another worker evaluated (Client::pause), the longest over
  // the shards.
  std::chrono::microseconds held{0};
  bool reached = true;  // every shard reached min_version and min_clock
  // Each shard's version when it answered a pull (by server index; -1: it sent no parameters).
  std::vector<int64_t> versions;
};

class Client {
 public:
  // Waits (within the timeout) for the first view.
  Client(const ClientOptions& options, Layout layout);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const Layout& layout() const { return layout_; }
  // Every key, in order (the whole table).
  std::vector<uint64_t> all_keys() const;

  // Gives each shard its part of `params` (the whole table, flat) unless a worker did so before.
  std::shared_ptr<comm::Work> init(std::span<const float> params);
  // Gives each shard the state snapshot() returned (a resumed job), unless it has one.
  std::shared_ptr<comm::Work> restore(std::vector<std::vector<uint8_t>> states);
  std::shared_ptr<comm::Work> push(std::span<const uint64_t> keys, std::span<const float> values,
                                   const PushPullOptions& options, PullInfo* info = nullptr);
  std::shared_ptr<comm::Work> pull(std::span<const uint64_t> keys, std::span<float> out,
                                   const PushPullOptions& options, PullInfo* info = nullptr);
  // A push and the pull after it, in one round trip per shard.
  std::shared_ptr<comm::Work> push_pull(std::span<const uint64_t> keys,
                                        std::span<const float> values, std::span<float> out,
                                        const PushPullOptions& options, PullInfo* info = nullptr);
  // kStop: every later answer says stopped; kRetire: the slot's clocks no longer count.
  std::shared_ptr<comm::Work> control(Control action, uint32_t slot = 0);
  // This slot evaluates while the other workers wait: from now on their answers are held by the
  // servers. Completes once every other worker waits on some server (or after `max_wait`, for a
  // worker that is gone); resume() lets them go.
  std::shared_ptr<comm::Work> pause(uint32_t slot, std::chrono::milliseconds max_wait);
  std::shared_ptr<comm::Work> resume(uint32_t slot);
  // Each shard's status and whole state, from its primary (blocking).
  std::vector<ShardStatus> status();
  std::vector<std::vector<uint8_t>> snapshot();

  int64_t view_number();

 private:
  struct Conn;
  struct Call;
  std::shared_ptr<comm::Work> submit(const char* what, std::function<void()> run);
  void run_loop();
  // Sends each present request to its shard's primary and returns every shard's answer (status
  // ok), following the primaries through views until the deadline.
  // `max_answer`: the largest answer accepted (0: a pull of the whole table and its header).
  std::vector<Response> exchange(std::vector<std::optional<Request>> requests, const char* what,
                                 Deadline deadline, size_t max_answer = 0);
  std::shared_ptr<comm::Work> transfer(const char* what, std::span<const uint64_t> keys,
                                       std::span<const float> values, std::span<float> out,
                                       bool push, bool pull, const PushPullOptions& o,
                                       PullInfo* info);
  Conn& connection(uint32_t shard, Deadline deadline);
  void next_view(int64_t at_least, Deadline deadline);
  std::string describe(uint32_t shard) const;

  const ClientOptions options_;
  const Layout layout_;
  std::unique_ptr<store::Store> store_;  // the client thread's
  View view_;
  std::map<uint32_t, std::unique_ptr<Conn>> conns_;  // by shard
  uint64_t next_id_ = 1;
  uint64_t seq_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::shared_ptr<comm::Work>, std::function<void()>>> queue_;
  bool stop_ = false;
  std::atomic<bool> closing_{false};  // destroyed: what waits to be retried is given up
  std::thread thread_;
};

}  // namespace cohort::ps
