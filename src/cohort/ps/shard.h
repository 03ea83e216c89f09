// One shard of a parameter table as a server holds it: the parameters, the optimizer's state and
// the clocks of the workers that push to it. Pure state, no I/O: the primary and its backup run
// the same requests through it in the same order and so hold the same shard (state-machine
// replication, server.h).
//
// Every worker ("slot") numbers its pushes 0, 1, 2, ...: its clock. A push of a clock the slot has
// pushed before is a duplicate (a retry after a failover) and changes nothing, so a push counts
// once however often it is sent.
//
// ssp (Stale Synchronous Parallel, Ho et al. NIPS'13): the pushes of clock c wait until every
// slot that is not retired has pushed c; then their sum, in slot order, is one optimizer step,
// and the shard's version becomes c + 1. The version is thus the number of clocks whose updates
// the parameters hold. A worker at clock c asks for version >= c - s (server.h answers when it
// is reached), so no worker runs more than s clocks ahead of the slowest. s = 0 is synchronous
// SGD: with the gradients of the mean over the global batch, the same step as an allreduce.
//
// async: every push is an optimizer step of its own, at once; the version counts pushes.
//
// Staleness of a gradient: the updates the parameters it was computed on missed by the time it is
// applied, in clocks (async: pushes divided by the slots that push). The corrections, per push:
//   inverse_staleness   the push is scaled by 1 / max(1, staleness)  (Zhang et al. IJCAI'16)
//   delay_compensation  g + lambda * g * g * (w_now - w_read)        (DC-ASGD, Zheng et al.
//   ICML'17)
// where w_read is the shard as the slot last read it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "cohort/ps/layout.h"
#include "cohort/ps/optimizer.h"
#include "cohort/ps/protocol.h"

namespace cohort::ps {

enum class Consistency : uint8_t { Ssp = 1, Async = 2 };
enum class Correction : uint8_t { None = 0, InverseStaleness = 1, DelayCompensation = 2 };

struct ShardSettings {
  int slots = 1;
  Consistency consistency = Consistency::Ssp;
  OptimizerSettings optimizer{};
  Correction correction = Correction::None;
  double dc_lambda = 0.04;
  bool operator==(const ShardSettings&) const = default;
};

// A slot that reads without being one of the workers (a checkpoint, a status query).
inline constexpr uint32_t kNoSlot = 0xffffffffu;

class Shard {
 public:
  Shard(const ShardSettings& settings, Range range, std::vector<float> params);
  // A shard as save() wrote it. Throws ProtocolError when the bytes are malformed or were saved
  // for another number of slots.
  static Shard restore(const ShardSettings& settings, const std::vector<uint8_t>& saved);
  std::vector<uint8_t> save() const;

  // Slot's push of `clock`: f32 values (raw, possibly unaligned) of `ranges`, which must lie in
  // the shard; what the shard lacks counts as zero. Returns false, changing nothing, for a clock
  // the slot pushed before. Throws Error for a slot out of range, a clock past the slot's next
  // one, or a range outside the shard.
  bool push(uint32_t slot, int64_t clock, double lr, std::span<const Range> ranges,
            const void* values, const SampleCounts& counts);
  // Copies `ranges` of the parameters to `out` (raw f32). Throws Error for a range outside.
  void read(std::span<const Range> ranges, void* out) const;
  // Slot read the parameters as they are now: its staleness and delay compensation count from
  // here.
  void note_read(uint32_t slot);
  // Throws Error naming the first of `ranges` that is not in the shard, or two that overlap.
  void check_ranges(std::span<const Range> ranges) const;
  // Throws Error for a slot that is neither kNoSlot nor one of the job's.
  void check_slot(uint32_t slot) const;
  ShardStatus status() const;
  void stop() { stopped_ = true; }
  // The slot's worker is gone for good: no clock waits for it any more.
  void retire(uint32_t slot);

  const Range& range() const { return range_; }
  int64_t version() const { return version_; }
  // The lowest clock any slot that is not retired will push next: every clock below it is in the
  // parameters (ssp) or has been pushed by every such slot (async).
  int64_t min_clock() const;
  uint64_t applied() const { return applied_; }
  bool stopped() const { return stopped_; }
  int64_t next_clock(uint32_t slot) const { return slots_.at(slot).next_clock; }
  std::vector<int64_t> slot_clocks() const;
  const std::map<int64_t, SampleCounts>& counts() const { return counts_; }
  const std::vector<float>& params() const { return params_; }
  const OptimizerState& optimizer_state() const { return opt_; }
  // The staleness (in clocks) of every gradient applied so far, by whole clocks: [0], [1], ...
  const std::vector<uint64_t>& staleness_histogram() const { return staleness_; }

 private:
  struct Slot {
    int64_t next_clock = 0;
    int64_t read_version = 0;  // the version it last read
    bool retired = false;
    std::vector<float> read_params;  // delay compensation: the shard as it last read it
  };
  // One slot's push of a clock that waits for the others (ssp).
  struct Contribution {
    std::vector<float> grad;
    int64_t read_version = 0;
    std::vector<float> read_params;
  };
  struct PendingClock {
    double lr = 0;
    std::vector<std::optional<Contribution>> by_slot;
  };

  Shard() = default;
  std::vector<float> gather(std::span<const Range> ranges, const void* values) const;
  // The push's gradient after the staleness correction, added to `sum` (sized to the shard).
  void add_corrected(std::vector<float>& sum, const std::vector<float>& grad, double staleness,
                     const std::vector<float>& read_params);
  void complete_clocks();
  size_t active_slots() const;
  void check_range(const Range& r) const;

  ShardSettings settings_{};
  Range range_{};
  std::vector<float> params_;
  OptimizerState opt_;
  int64_t version_ = 0;
  uint64_t applied_ = 0;  // pushes accepted
  bool stopped_ = false;
  std::vector<Slot> slots_;
  std::map<int64_t, PendingClock> pending_;  // ssp
  std::map<int64_t, SampleCounts> counts_;   // by epoch
  std::vector<uint64_t> staleness_;
};

}  // namespace cohort::ps
