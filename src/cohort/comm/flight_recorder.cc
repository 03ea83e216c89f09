#include "cohort/comm/flight_recorder.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

namespace cohort::comm {

std::string_view collective_state_name(CollectiveState s) {
  switch (s) {
    case CollectiveState::Queued:
      return "queued";
    case CollectiveState::Started:
      return "started";
    case CollectiveState::Done:
      return "done";
    case CollectiveState::Failed:
      return "failed";
  }
  return "?";
}

namespace {
constexpr std::string_view kPhaseNames[] = {"setup",     "data",       "forward",  "backward",
                                            "optimizer", "checkpoint", "evaluate", "done",
                                            "training",  "averaging",  "exchange"};
}  // namespace

std::string_view phase_name(Phase p) {
  auto i = static_cast<size_t>(p);
  return i < std::size(kPhaseNames) ? kPhaseNames[i] : "?";
}

Phase parse_phase(std::string_view s) {
  for (size_t i = 0; i < std::size(kPhaseNames); ++i) {
    if (kPhaseNames[i] == s) return static_cast<Phase>(i);
  }
  return Phase::Setup;
}

namespace {

// COHORT_CLOCK_SKEW_US shifts this process's clock, to test that timelines of processes whose
// clocks disagree are aligned (tests/e2e/trace_test.cc). Read once.
int64_t clock_skew_us() {
  static const int64_t skew = [] {
    const char* s = std::getenv("COHORT_CLOCK_SKEW_US");
    return s ? std::strtoll(s, nullptr, 10) : 0;
  }();
  return skew;
}

int64_t steady_ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

int64_t now_us() {
  using namespace std::chrono;
  return duration_cast<microseconds>(system_clock::now().time_since_epoch()).count() +
         clock_skew_us();
}

FlightRecorder::FlightRecorder(int rank, size_t capacity)
    : rank_(rank), ring_(capacity == 0 ? 1 : capacity) {
  since_us_.store(now_us(), std::memory_order_relaxed);
  resync_wall(/*adopt=*/true);
}

void FlightRecorder::resync_wall(bool adopt) const {
  using namespace std::chrono;
  // The wall clock read between two reads of the steady clock, taken against their midpoint; a
  // pair far apart (the thread was preempted between them) is read again.
  int64_t offset = 0;
  int64_t after = 0;
  for (int tries = 0; tries < 3; ++tries) {
    const int64_t before = steady_ns(Clock::now());
    const int64_t wall = duration_cast<nanoseconds>(system_clock::now().time_since_epoch()).count();
    after = steady_ns(Clock::now());
    offset = wall - before / 2 - after / 2;
    if (after - before <= kResyncSpreadNs) break;
  }
  // Between steps of the wall clock the two clocks run at the same rate: a new reading that
  // differs by less than kStepNs is this measurement's own error, and is not taken, so that the
  // records of an operation stay in order.
  const int64_t old = wall_minus_steady_ns_.load(std::memory_order_relaxed);
  if (adopt || offset - old > kStepNs || old - offset > kStepNs) {
    wall_minus_steady_ns_.store(offset, std::memory_order_relaxed);
  }
  synced_ns_.store(after, std::memory_order_relaxed);
}

int64_t FlightRecorder::wall_us(Clock::time_point at) const {
  if (at == Clock::time_point{}) at = Clock::now();
  const int64_t steady = steady_ns(at);
  if (steady - synced_ns_.load(std::memory_order_relaxed) > kResyncNs) resync_wall(false);
  return (steady + wall_minus_steady_ns_.load(std::memory_order_relaxed)) / 1000 + clock_skew_us();
}

void FlightRecorder::restart() {
  std::lock_guard lk(mu_);
  std::fill(ring_.begin(), ring_.end(), CollectiveRecord{});
  newest_ = 0;
  messages_.clear();
  prune_at_ = 64;
  last_done_.store(0, std::memory_order_relaxed);
}

CollectiveRecord* FlightRecorder::find(uint64_t seq) {
  CollectiveRecord& r = ring_[seq % ring_.size()];
  return r.seq == seq ? &r : nullptr;
}

void FlightRecorder::on_queued(const CollectiveRecord& r, Clock::time_point at) {
  const int64_t t = wall_us(at);
  std::lock_guard lk(mu_);
  CollectiveRecord& slot = ring_[r.seq % ring_.size()];
  slot = r;
  slot.state = CollectiveState::Queued;
  slot.queued_us = t;
  if (r.seq > newest_) newest_ = r.seq;
}

void FlightRecorder::on_started(uint64_t seq, Algorithm algorithm, Clock::time_point at) {
  const int64_t t = wall_us(at);
  std::lock_guard lk(mu_);
  if (CollectiveRecord* r = find(seq)) {
    r->state = CollectiveState::Started;
    r->started_us = t;
    r->algorithm = algorithm;
  }
}

void FlightRecorder::on_finished(uint64_t seq, bool ok, const OpTiming* timing,
                                 uint64_t sent_bytes) {
  const int64_t t = wall_us({});
  CollectiveObserver* observer = observer_.load(std::memory_order_acquire);
  CollectiveRecord copy;
  bool found = false;
  {
    std::lock_guard lk(mu_);
    if (CollectiveRecord* r = find(seq)) {
      r->state = ok ? CollectiveState::Done : CollectiveState::Failed;
      r->finished_us = t;
      if (timing) {
        r->wait_us = timing->wait_ns / 1000;
        r->reduce_us = timing->reduce_ns / 1000;
        r->peers = timing->peers;
      }
      r->sent_bytes = sent_bytes;
      const auto k = static_cast<size_t>(r->kind);
      if (ok && r->started_us > 0 && k < latency_.size()) {
        latency_[k].observe(static_cast<double>(t - r->started_us) * 1e-6);
      }
      if (ok) {
        totals_.collectives += 1;
        totals_.sent_bytes += sent_bytes;
        totals_.active_us += r->started_us > 0 ? t - r->started_us : 0;
        totals_.wait_us += r->wait_us;
      }
      if (observer) copy = *r;
      found = true;
    }
  }
  if (observer && found) observer->on_collective(copy);
  if (ok && seq > last_done_.load(std::memory_order_relaxed)) {
    last_done_.store(seq, std::memory_order_relaxed);
  }
}

void FlightRecorder::set_label(uint64_t seq, std::string label) {
  std::lock_guard lk(mu_);
  if (CollectiveRecord* r = find(seq)) r->label = std::move(label);
}

void FlightRecorder::on_message_posted(const MessageRecord& r, std::weak_ptr<const Work> work) {
  std::lock_guard lk(mu_);
  if (messages_.size() >= prune_at_) {
    std::erase_if(messages_, [](const Posted& p) {
      auto w = p.work.lock();
      return !w || w->is_completed();
    });
    prune_at_ = std::max<size_t>(64, 2 * messages_.size());
  }
  messages_.push_back(Posted{.record = r, .work = std::move(work)});
  messages_.back().record.posted_us = now_us();
}

std::vector<MessageRecord> FlightRecorder::messages_in_flight() const {
  std::vector<MessageRecord> out;
  for (const Posted& p : messages_) {
    auto w = p.work.lock();
    if (w && !w->is_completed()) out.push_back(p.record);
  }
  if (out.size() > ring_.size()) out.resize(ring_.size());
  return out;
}

uint64_t FlightRecorder::newest() const {
  std::lock_guard lk(mu_);
  return newest_;
}

Activity FlightRecorder::activity() const {
  return Activity{.step = step_.load(std::memory_order_relaxed),
                  .phase = static_cast<Phase>(phase_.load(std::memory_order_relaxed)),
                  .since_us = since_us_.load(std::memory_order_relaxed)};
}

CollectiveTotals FlightRecorder::totals() const {
  std::lock_guard lk(mu_);
  return totals_;
}

FlightSnapshot FlightRecorder::snapshot() const {
  FlightSnapshot s{.rank = rank_, .taken_us = wall_us({}), .activity = activity(), .records = {}};
  std::lock_guard lk(mu_);
  const uint64_t n = ring_.size();
  const uint64_t first = newest_ >= n ? newest_ - n + 1 : 1;
  for (uint64_t seq = first; seq <= newest_; ++seq) {
    const CollectiveRecord& r = ring_[seq % n];
    if (r.seq == seq) s.records.push_back(r);
  }
  s.messages = messages_in_flight();
  return s;
}

std::vector<FlightRecorder::KindLatency> FlightRecorder::latencies() const {
  std::vector<KindLatency> out;
  std::lock_guard lk(mu_);
  for (size_t k = 0; k < latency_.size(); ++k) {
    if (latency_[k].count() > 0) out.push_back({static_cast<OpKind>(k), latency_[k]});
  }
  return out;
}

}  // namespace cohort::comm
