#include "cohort/ps/shard.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "cohort/base/bytes.h"
#include "cohort/base/error.h"

namespace cohort::ps {
namespace {

constexpr uint32_t kShardMagic = 0x48535350;  // "PSSH"
constexpr uint16_t kShardFormat = 1;
// Staleness beyond this many clocks is counted in the last bucket of the histogram.
constexpr size_t kHistogramBuckets = 64;

void put_floats(ByteWriter& w, const std::vector<float>& v) {
  w.put<uint64_t>(v.size());
  w.put_bytes(v.data(), v.size() * sizeof(float));
}

std::vector<float> get_floats(ByteReader& r) {
  const auto n = r.get<uint64_t>();
  if (n > r.remaining() / sizeof(float)) throw ProtocolError("shard state truncated");
  std::vector<float> v(static_cast<size_t>(n));
  copy_bytes(v.data(), r.get_bytes(v.size() * sizeof(float)), v.size() * sizeof(float));
  return v;
}

}  // namespace

Shard::Shard(const ShardSettings& settings, Range range, std::vector<float> params)
    : settings_(settings), range_(range), params_(std::move(params)) {
  if (settings_.slots < 1) throw Error("a parameter-server shard needs at least one worker slot");
  if (params_.size() != range_.count) {
    throw Error("shard of " + std::to_string(range_.count) + " values initialised with " +
                std::to_string(params_.size()));
  }
  slots_.resize(static_cast<size_t>(settings_.slots));
  if (settings_.correction == Correction::DelayCompensation) {
    for (Slot& s : slots_) s.read_params = params_;
  }
}

void Shard::check_range(const Range& r) const {
  if (r.offset < range_.offset || r.end() > range_.end() || r.end() < r.offset) {
    throw Error("range [" + std::to_string(r.offset) + ", " + std::to_string(r.end()) +
                ") is not in this shard [" + std::to_string(range_.offset) + ", " +
                std::to_string(range_.end()) + ")");
  }
}

std::vector<float> Shard::gather(std::span<const Range> ranges, const void* values) const {
  std::vector<float> grad(params_.size(), 0.0f);
  const auto* src = static_cast<const uint8_t*>(values);
  for (const Range& r : ranges) {
    check_range(r);
    copy_bytes(grad.data() + (r.offset - range_.offset), src, r.count * sizeof(float));
    src += r.count * sizeof(float);
  }
  return grad;
}

size_t Shard::active_slots() const {
  return static_cast<size_t>(
      std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return !s.retired; }));
}

int64_t Shard::min_clock() const {
  int64_t m = std::numeric_limits<int64_t>::max();
  for (const Slot& s : slots_) {
    if (!s.retired) m = std::min(m, s.next_clock);
  }
  return m == std::numeric_limits<int64_t>::max() ? version_ : m;
}

std::vector<int64_t> Shard::slot_clocks() const {
  std::vector<int64_t> v;
  for (const Slot& s : slots_) v.push_back(s.retired ? -1 : s.next_clock);
  return v;
}

bool Shard::push(uint32_t slot, int64_t clock, double lr, std::span<const Range> ranges,
                 const void* values, const SampleCounts& counts) {
  if (slot >= slots_.size()) {
    throw Error("slot " + std::to_string(slot) + " pushed, but the job has " +
                std::to_string(slots_.size()) + " workers");
  }
  Slot& s = slots_[slot];
  if (clock < s.next_clock) return false;
  if (s.retired)
    throw Error("slot " + std::to_string(slot) + " was retired: its pushes no longer count");
  if (clock > s.next_clock) {
    throw Error("slot " + std::to_string(slot) + " pushed clock " + std::to_string(clock) +
                " before clock " + std::to_string(s.next_clock));
  }
  if (!std::isfinite(lr)) throw Error("push with a learning rate that is not finite");
  std::vector<float> grad = gather(ranges, values);
  s.next_clock = clock + 1;
  ++applied_;
  SampleCounts& c = counts_[counts.epoch];
  c.epoch = counts.epoch;
  c.samples += counts.samples;
  c.id_sum += counts.id_sum;
  c.id_sq_sum += counts.id_sq_sum;
  if (settings_.consistency == Consistency::Async) {
    const double staleness = static_cast<double>(version_ - s.read_version) /
                             static_cast<double>(std::max<size_t>(1, active_slots()));
    std::vector<float> step(params_.size(), 0.0f);
    add_corrected(step, grad, staleness, s.read_params);
    optimizer_step(settings_.optimizer, opt_, params_, step, lr);
    ++version_;
    return true;
  }
  PendingClock& p = pending_[clock];
  if (p.by_slot.empty()) {
    p.by_slot.resize(slots_.size());
    p.lr = lr;
  }
  p.by_slot[slot] = Contribution{
      .grad = std::move(grad), .read_version = s.read_version, .read_params = s.read_params};
  complete_clocks();
  return true;
}

void Shard::add_corrected(std::vector<float>& sum, const std::vector<float>& grad, double staleness,
                          const std::vector<float>& read_params) {
  staleness = std::max(0.0, staleness);
  const size_t bucket = std::min(static_cast<size_t>(staleness), kHistogramBuckets - 1);
  if (staleness_.size() <= bucket) staleness_.resize(bucket + 1, 0);
  ++staleness_[bucket];
  switch (settings_.correction) {
    case Correction::None:
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += grad[i];
      return;
    case Correction::InverseStaleness: {
      const auto scale = static_cast<float>(1.0 / std::max(1.0, staleness));
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += scale * grad[i];
      return;
    }
    case Correction::DelayCompensation: {
      const auto lambda = static_cast<float>(settings_.dc_lambda);
      for (size_t i = 0; i < sum.size(); ++i) {
        const float g = grad[i];
        sum[i] += g + lambda * g * g * (params_[i] - read_params[i]);
      }
      return;
    }
  }
}

// ssp: applies every clock, in order, that each active slot has pushed.
void Shard::complete_clocks() {
  for (;;) {
    auto it = pending_.find(version_);
    if (it == pending_.end()) return;
    PendingClock& p = it->second;
    for (size_t m = 0; m < slots_.size(); ++m) {
      if (!slots_[m].retired && !p.by_slot[m]) return;
    }
    std::vector<float> sum(params_.size(), 0.0f);
    for (auto& c : p.by_slot) {
      if (!c) continue;
      add_corrected(sum, c->grad, static_cast<double>(version_ - c->read_version), c->read_params);
    }
    optimizer_step(settings_.optimizer, opt_, params_, sum, p.lr);
    pending_.erase(it);
    ++version_;
  }
}

void Shard::check_ranges(std::span<const Range> ranges) const {
  for (const Range& r : ranges) check_range(r);
  // Disjoint: a request names each value once, so what it asks for is at most the shard.
  std::vector<Range> sorted(ranges.begin(), ranges.end());
  std::sort(sorted.begin(), sorted.end(),
            [](const Range& a, const Range& b) { return a.offset < b.offset; });
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i].offset < sorted[i - 1].end()) {
      throw Error("ranges [" + std::to_string(sorted[i - 1].offset) + ", " +
                  std::to_string(sorted[i - 1].end()) + ") and [" +
                  std::to_string(sorted[i].offset) + ", " + std::to_string(sorted[i].end()) +
                  ") overlap");
    }
  }
}

void Shard::check_slot(uint32_t slot) const {
  if (slot != kNoSlot && slot >= slots_.size()) {
    throw Error("slot " + std::to_string(slot) + " asked, but the job has " +
                std::to_string(slots_.size()) + " workers");
  }
}

void Shard::read(std::span<const Range> ranges, void* out) const {
  auto* dst = static_cast<uint8_t*>(out);
  for (const Range& r : ranges) {
    check_range(r);
    copy_bytes(dst, params_.data() + (r.offset - range_.offset), r.count * sizeof(float));
    dst += r.count * sizeof(float);
  }
}

ShardStatus Shard::status() const {
  ShardStatus s{.version = version_,
                .min_clock = min_clock(),
                .applied = applied_,
                .stopped = stopped_,
                .slot_clocks = slot_clocks(),
                .staleness = staleness_};
  for (const auto& [epoch, c] : counts_) s.counts.push_back(c);
  return s;
}

void Shard::note_read(uint32_t slot) {
  if (slot == kNoSlot) return;
  if (slot >= slots_.size()) {
    throw Error("slot " + std::to_string(slot) + " read, but the job has " +
                std::to_string(slots_.size()) + " workers");
  }
  slots_[slot].read_version = version_;
  if (settings_.correction == Correction::DelayCompensation) slots_[slot].read_params = params_;
}

void Shard::retire(uint32_t slot) {
  if (slot >= slots_.size())
    throw Error("retire of slot " + std::to_string(slot) + ": no such slot");
  slots_[slot].retired = true;
  // What it pushed and was acknowledged still counts (its samples are counted already): its
  // pending contributions are applied with their clocks; only its later clocks are not waited for.
  if (settings_.consistency == Consistency::Ssp) complete_clocks();
}

std::vector<uint8_t> Shard::save() const {
  ByteWriter w;
  w.put<uint32_t>(kShardMagic).put<uint16_t>(kShardFormat);
  w.put<uint64_t>(range_.offset).put<uint64_t>(range_.count);
  put_floats(w, params_);
  put_floats(w, opt_.first);
  put_floats(w, opt_.second);
  w.put<int64_t>(opt_.steps).put<int64_t>(version_).put<uint64_t>(applied_);
  w.put<uint8_t>(stopped_ ? 1 : 0);
  w.put<uint32_t>(static_cast<uint32_t>(slots_.size()));
  for (const Slot& s : slots_) {
    w.put<int64_t>(s.next_clock).put<int64_t>(s.read_version).put<uint8_t>(s.retired ? 1 : 0);
    put_floats(w, s.read_params);
  }
  w.put<uint32_t>(static_cast<uint32_t>(pending_.size()));
  for (const auto& [clock, p] : pending_) {
    w.put<int64_t>(clock).put<double>(p.lr);
    for (const auto& c : p.by_slot) {
      w.put<uint8_t>(c ? 1 : 0);
      if (!c) continue;
      w.put<int64_t>(c->read_version);
      put_floats(w, c->grad);
      put_floats(w, c->read_params);
    }
  }
  w.put<uint32_t>(static_cast<uint32_t>(counts_.size()));
  for (const auto& [epoch, c] : counts_) {
    w.put<int64_t>(epoch).put<double>(c.samples).put<double>(c.id_sum).put<double>(c.id_sq_sum);
  }
  w.put<uint32_t>(static_cast<uint32_t>(staleness_.size()));
  for (uint64_t n : staleness_) w.put<uint64_t>(n);
  return w.take();
}

Shard Shard::restore(const ShardSettings& settings, const std::vector<uint8_t>& saved) {
  ByteReader r(saved);
  if (r.get<uint32_t>() != kShardMagic) throw ProtocolError("not a saved parameter-server shard");
  if (r.get<uint16_t>() != kShardFormat) throw ProtocolError("unknown shard state format");
  Shard s;
  s.settings_ = settings;
  s.range_ = {r.get<uint64_t>(), r.get<uint64_t>()};
  s.params_ = get_floats(r);
  if (s.params_.size() != s.range_.count) throw ProtocolError("shard state: wrong parameter count");
  s.opt_.first = get_floats(r);
  s.opt_.second = get_floats(r);
  auto sized = [&](const std::vector<float>& v) {
    return v.empty() || v.size() == s.params_.size();
  };
  if (!sized(s.opt_.first) || !sized(s.opt_.second)) {
    throw ProtocolError("shard state: optimizer state of the wrong size");
  }
  s.opt_.steps = r.get<int64_t>();
  s.version_ = r.get<int64_t>();
  s.applied_ = r.get<uint64_t>();
  s.stopped_ = r.get<uint8_t>() != 0;
  const auto n_slots = r.get<uint32_t>();
  if (n_slots != static_cast<uint32_t>(settings.slots)) {
    throw ProtocolError("shard state for " + std::to_string(n_slots) + " workers, the job has " +
                        std::to_string(settings.slots));
  }
  s.slots_.resize(n_slots);
  for (Slot& slot : s.slots_) {
    slot.next_clock = r.get<int64_t>();
    slot.read_version = r.get<int64_t>();
    slot.retired = r.get<uint8_t>() != 0;
    slot.read_params = get_floats(r);
    if (!sized(slot.read_params)) throw ProtocolError("shard state: a slot's read of wrong size");
    if (settings.correction == Correction::DelayCompensation && slot.read_params.empty()) {
      slot.read_params = s.params_;
    }
  }
  const auto n_pending = r.get<uint32_t>();
  for (uint32_t i = 0; i < n_pending; ++i) {
    const auto clock = r.get<int64_t>();
    PendingClock& p = s.pending_[clock];
    p.lr = r.get<double>();
    p.by_slot.resize(n_slots);
    for (auto& c : p.by_slot) {
      if (r.get<uint8_t>() == 0) continue;
      c.emplace();
      c->read_version = r.get<int64_t>();
      c->grad = get_floats(r);
      c->read_params = get_floats(r);
      if (c->grad.size() != s.params_.size() || !sized(c->read_params)) {
        throw ProtocolError("shard state: a pending push of the wrong size");
      }
      // Saved without delay compensation: compensated from the parameters as restored.
      if (settings.correction == Correction::DelayCompensation && c->read_params.empty()) {
        c->read_params = s.params_;
      }
    }
  }
  const auto n_counts = r.get<uint32_t>();
  for (uint32_t i = 0; i < n_counts; ++i) {
    SampleCounts c;
    c.epoch = r.get<int64_t>();
    c.samples = r.get<double>();
    c.id_sum = r.get<double>();
    c.id_sq_sum = r.get<double>();
    s.counts_[c.epoch] = c;
  }
  const auto n_hist = r.get<uint32_t>();
  if (n_hist > kHistogramBuckets) throw ProtocolError("shard state: staleness histogram too long");
  for (uint32_t i = 0; i < n_hist; ++i) s.staleness_.push_back(r.get<uint64_t>());
  if (!r.done()) throw ProtocolError("trailing bytes after a shard state");
  return s;
}

}  // namespace cohort::ps
