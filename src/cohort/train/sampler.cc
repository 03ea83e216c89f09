#include "cohort/train/sampler.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "cohort/base/error.h"

namespace cohort::train {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in [0, bound] by rejection, so that the result is the same with every standard library
// (std::uniform_int_distribution's algorithm is unspecified).
uint64_t uniform_to(std::mt19937_64& gen, uint64_t bound) {
  const uint64_t range = bound + 1;
  if (range == 0) return gen();
  const uint64_t limit = std::mt19937_64::max() - (std::mt19937_64::max() % range + 1) % range;
  uint64_t x;
  do {
    x = gen();
  } while (x > limit);
  return x % range;
}

}  // namespace

DistributedSampler::DistributedSampler(SamplerOptions options) : opt_(options) {
  if (opt_.dataset_size <= 0 || opt_.world_size <= 0 || opt_.batch_size <= 0 || opt_.rank < 0 ||
      opt_.rank >= opt_.world_size) {
    throw Error("DistributedSampler: invalid options (dataset_size " +
                std::to_string(opt_.dataset_size) + ", world_size " +
                std::to_string(opt_.world_size) + ", rank " + std::to_string(opt_.rank) +
                ", batch_size " + std::to_string(opt_.batch_size) + ")");
  }
  reset(0, 0);
}

std::vector<int64_t> DistributedSampler::permutation(int64_t size, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> perm(static_cast<size_t>(size));
  for (int64_t i = 0; i < size; ++i) perm[static_cast<size_t>(i)] = i;
  std::mt19937_64 gen(splitmix64(seed ^ splitmix64(static_cast<uint64_t>(epoch))));
  for (int64_t i = size - 1; i > 0; --i) {
    auto j = static_cast<int64_t>(uniform_to(gen, static_cast<uint64_t>(i)));
    std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
  }
  return perm;
}

void DistributedSampler::reset(int64_t epoch, int64_t consumed) {
  if (epoch < 0 || consumed < 0 || consumed > opt_.dataset_size) {
    throw Error("DistributedSampler: cannot resume epoch " + std::to_string(epoch) + " at " +
                std::to_string(consumed) + " consumed samples of " +
                std::to_string(opt_.dataset_size));
  }
  if (epoch != epoch_) perm_ = permutation(opt_.dataset_size, opt_.seed, epoch);
  epoch_ = epoch;
  consumed_ = consumed;
  step_ = 0;
}

int64_t DistributedSampler::steps_from(int64_t consumed) const {
  const int64_t global = opt_.world_size * opt_.batch_size;
  const int64_t left = opt_.dataset_size - consumed;
  return left / global + (!opt_.drop_last && left % global != 0 ? 1 : 0);
}

int64_t DistributedSampler::steps_remaining() const {
  return steps_from(consumed_);
}
int64_t DistributedSampler::steps_per_epoch() const {
  return steps_from(0);
}

std::optional<Batch> DistributedSampler::next() {
  const int64_t world = opt_.world_size;
  const int64_t global = world * opt_.batch_size;
  const int64_t left = opt_.dataset_size - consumed_;
  if (left <= 0 || (left < global && opt_.drop_last)) return std::nullopt;
  const int64_t take = std::min(left, global);
  const std::vector<int64_t> counts = slice_counts(take);
  const auto r = static_cast<size_t>(opt_.rank);
  int64_t offset = consumed_;
  for (size_t q = 0; q < r; ++q) offset += counts[q];
  const int64_t count = counts[r];
  Batch b{.indices = {}, .step = step_, .global_batch = take};
  b.indices.assign(perm_.begin() + offset, perm_.begin() + offset + count);
  consumed_ += take;
  ++step_;
  return b;
}

void DistributedSampler::set_shares(const std::vector<double>& weights) {
  double sum = 0;
  for (double w : weights) {
    if (!(w > 0) || !std::isfinite(w)) {
      throw Error("DistributedSampler: shares must be positive, got " + std::to_string(w));
    }
    sum += w;
  }
  if (weights.size() != static_cast<size_t>(opt_.world_size)) {
    throw Error("DistributedSampler: " + std::to_string(weights.size()) + " shares for " +
                std::to_string(opt_.world_size) + " ranks");
  }
  shares_.clear();
  for (double w : weights) shares_.push_back(w / sum);
}

std::vector<int64_t> DistributedSampler::slice_counts(int64_t take) const {
  const auto world = static_cast<size_t>(opt_.world_size);
  std::vector<int64_t> counts(world, take / opt_.world_size);
  std::vector<double> exact(world, static_cast<double>(take) / static_cast<double>(world));
  if (!shares_.empty()) {
    for (size_t r = 0; r < world; ++r) {
      exact[r] = static_cast<double>(take) * shares_[r];
      counts[r] = static_cast<int64_t>(std::floor(exact[r]));
    }
  }
  int64_t given = 0;
  for (int64_t c : counts) given += c;
  // Largest remainder first; among equal remainders the lower rank.
  std::vector<size_t> order(world);
  for (size_t r = 0; r < world; ++r) order[r] = r;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return exact[a] - static_cast<double>(counts[a]) > exact[b] - static_cast<double>(counts[b]);
  });
  for (size_t i = 0; given < take; i = (i + 1) % world, ++given) ++counts[order[i]];
  // Every rank one sample at least while there is one for each: from the largest slice.
  if (take >= opt_.world_size) {
    for (size_t r = 0; r < world; ++r) {
      if (counts[r] > 0) continue;
      auto largest = std::max_element(counts.begin(), counts.end());
      --*largest;
      ++counts[r];
    }
  }
  return counts;
}

}  // namespace cohort::train
