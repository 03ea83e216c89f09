#include "cohort/ps/layout.h"

#include <algorithm>
#include <string>

#include "cohort/base/error.h"

namespace cohort::ps {

Layout::Layout(std::vector<uint64_t> sizes, int servers) : sizes_(std::move(sizes)) {
  if (servers < 1) throw Error("a parameter-server layout needs at least one server");
  offsets_.reserve(sizes_.size());
  for (uint64_t n : sizes_) {
    offsets_.push_back(total_);
    total_ += n;
  }
  // Server s holds [s * total / servers, (s + 1) * total / servers): lengths differ by at most 1.
  const auto n = static_cast<uint64_t>(servers);
  for (uint64_t s = 0; s < n; ++s) {
    const uint64_t begin = total_ / n * s + std::min(s, total_ % n);
    const uint64_t len = total_ / n + (s < total_ % n ? 1 : 0);
    shards_.push_back({begin, len});
  }
}

Range Layout::key_range(uint64_t key) const {
  if (key >= sizes_.size()) {
    throw Error("parameter-server key " + std::to_string(key) + " is not in the table (it has " +
                std::to_string(sizes_.size()) + " keys)");
  }
  return {offsets_[key], sizes_[key]};
}

uint64_t Layout::count(std::span<const uint64_t> keys) const {
  uint64_t n = 0;
  for (uint64_t k : keys) n += key_range(k).count;
  return n;
}

std::vector<Layout::Piece> Layout::pieces(std::span<const uint64_t> keys, int s) const {
  const Range& shard = this->shard(s);
  std::vector<Piece> out;
  uint64_t at = 0;
  for (uint64_t k : keys) {
    const Range r = key_range(k);
    const uint64_t lo = std::max(r.offset, shard.offset);
    const uint64_t hi = std::min(r.end(), shard.end());
    if (lo < hi) {
      // Keys given in flat order produce adjacent pieces: merge them into one.
      if (!out.empty() && out.back().range.end() == lo &&
          out.back().at + out.back().range.count == at + (lo - r.offset)) {
        out.back().range.count += hi - lo;
      } else {
        out.push_back({{lo, hi - lo}, at + (lo - r.offset)});
      }
    }
    at += r.count;
  }
  return out;
}

}  // namespace cohort::ps
