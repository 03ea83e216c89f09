// Datasets in memory as tensors: images [N, C, H, W], labels int64 [N]; a batch's images are
// float32.
//
// fashion-mnist / mnist: the IDX files of data.path (idx.h), kept as their bytes (a quarter of the
// memory, and no pass over all of them at load: a replacement worker starts sooner), each batch
// scaled to [0, 1] as it is taken.
// synthetic: a learnable classification problem of any size, for benchmarks of larger models.
//   Each class k has a mean image mu_k ~ N(0, 1) per value; an example of class k is
//   mu_k + N(0, 1) noise, its class drawn uniformly. Means and examples come from private
//   generators seeded by the job's seed, so every rank builds the same data without talking.
//   The test split has ceil(samples / 5) examples drawn with the same means.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cohort/train/config.h"
#include "cohort/train/idx.h"

namespace cohort::train {

struct Dataset {
  torch::Tensor images;  // uint8 (pixels, 0 to 255) or float32, [N, C, H, W]
  torch::Tensor labels;  // int64 [N]

  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
  // The examples at `indices` (as DistributedSampler hands them out): {images as float32 (pixels
  // scaled to [0, 1]), labels}.
  std::pair<torch::Tensor, torch::Tensor> batch(const std::vector<int64_t>& indices) const;
};

// The IDX dataset under `dir` (train: train-*, test: t10k-*). Throws DatasetError.
Dataset load_idx_dataset(const std::string& dir, Split split);

struct SyntheticOptions {
  int64_t samples = 10000;
  std::vector<int64_t> shape = {1, 28, 28};
  int64_t classes = 10;
  uint64_t seed = 0;
};
Dataset make_synthetic(const SyntheticOptions& options, Split split);

// The dataset the job's data section describes; `seed` is train.seed (used by synthetic).
Dataset load_dataset(const DataConfig& data, Split split, uint64_t seed);

}  // namespace cohort::train
