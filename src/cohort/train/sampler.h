// DistributedSampler: which samples each rank trains on, step by step, in one epoch.
//
// Schedule. Every epoch has one permutation of [0, N), the same on every rank: a Fisher-Yates
// shuffle driven by mt19937_64 seeded from (seed, epoch), so it does not depend on the standard
// library's shuffle. The permutation is consumed in global batches of world_size x batch_size
// samples; rank r takes the r-th contiguous slice of each global batch:
//
//   permutation:  [ g0: r0 r0 | r1 r1 ][ g1: r0 r0 | r1 r1 ][ tail: r0 | r1 ]     (W=2, B=2)
//
// The remainder (the last, partial global batch of R < W x B samples) depends on the policy:
// - drop_last = false (default): the tail is one more step, split as evenly as possible (slices
//   differ by at most one sample; with R < W some ranks get an empty slice). Every sample is
//   used exactly once per epoch; every rank runs the same number of steps; the last step's
//   batches are smaller, so gradient averaging must weight by global_batch (see Batch).
// - drop_last = true: the tail is not trained on in this epoch. Every step has full batches;
//   up to W x B - 1 samples per epoch are skipped, different ones each epoch.
// Nothing is ever repeated (no padding by wrap-around).
//
// Shares (sync.balance: auto). By default each rank's slice is an equal share of the global
// batch. set_shares() gives rank r the fraction w_r / sum(w) of every global batch (the tail's
// too) instead, rounded by largest remainder (ties to the lower rank) so that the slices still
// tile the global batch, and at least one sample each while the batch has one per rank. Equal
// weights give the equal split exactly. The global batch, the steps and the position do not
// change, so every sample is still used exactly once.
//
// Position. The only state is (epoch, consumed): how many samples of the epoch's permutation
// all ranks together have taken. It does not depend on the world size, so resuming - with the
// same or a different number of ranks, even mid-epoch and with consumed not a multiple of the
// new global batch - is `reset(epoch, consumed)` on samplers built for the new world: the
// remaining samples are re-sharded over the new ranks and again each is used exactly once.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace cohort::train {

struct SamplerOptions {
  int64_t dataset_size = 0;
  int world_size = 1;
  int rank = 0;
  int64_t batch_size = 1;  // per rank
  uint64_t seed = 0;
  bool drop_last = false;
};

struct Batch {
  std::vector<int64_t> indices = {};  // this rank's sample indices (may be empty in the last step)
  int64_t step = 0;                   // step within the epoch since reset(), from 0
  int64_t global_batch = 0;           // samples taken by all ranks together in this step
};

class DistributedSampler {
 public:
  // Throws cohort::Error on a non-positive size, world or batch, or a rank out of range.
  explicit DistributedSampler(SamplerOptions options);

  // Start (or resume) `epoch` after `consumed` samples of it were taken by all ranks together.
  void reset(int64_t epoch, int64_t consumed = 0);
  // This rank's next batch, or nullopt at the end of the epoch.
  std::optional<Batch> next();
  // Each rank's weight (world_size positive numbers; the same on every rank), from the next
  // batch on, across reset(). Throws cohort::Error for another count or a weight <= 0.
  void set_shares(const std::vector<double>& weights);
  // How `take` samples of a global batch split over the ranks.
  std::vector<int64_t> slice_counts(int64_t take) const;

  int64_t epoch() const { return epoch_; }
  // Samples of this epoch taken by all ranks so far: the value to store in a checkpoint.
  int64_t consumed() const { return consumed_; }
  // Steps left in this epoch from the current position (the same on every rank).
  int64_t steps_remaining() const;
  // Steps in a whole epoch from position 0.
  int64_t steps_per_epoch() const;
  const SamplerOptions& options() const { return opt_; }

  // The epoch's permutation of [0, dataset_size), identical on every rank.
  static std::vector<int64_t> permutation(int64_t size, uint64_t seed, int64_t epoch);

 private:
  int64_t steps_from(int64_t consumed) const;

  SamplerOptions opt_;
  int64_t epoch_ = -1;
  int64_t consumed_ = 0;
  int64_t step_ = 0;
  std::vector<int64_t> perm_;
  std::vector<double> shares_;  // normalised weights; empty: equal shares
};

}  // namespace cohort::train
