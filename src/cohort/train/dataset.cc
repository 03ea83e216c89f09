#include "cohort/train/dataset.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

namespace cohort::train {
namespace {

uint64_t mix(uint64_t seed, uint64_t stream) {
  uint64_t x = seed + 0x9E3779B97F4A7C15ull * (stream + 1);
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

std::pair<torch::Tensor, torch::Tensor> Dataset::batch(const std::vector<int64_t>& indices) const {
  torch::Tensor idx = torch::from_blob(const_cast<int64_t*>(indices.data()),
                                       {static_cast<int64_t>(indices.size())}, torch::kInt64)
                          .clone();
  torch::Tensor x = images.index_select(0, idx);
  if (x.scalar_type() == torch::kUInt8) x = x.to(torch::kFloat32).div_(255.0f);
  return {x, labels.index_select(0, idx)};
}

Dataset load_idx_dataset(const std::string& dir, Split split) {
  IdxSplit s = read_idx_split(dir, split);
  const int64_t n = s.images.dims[0], rows = s.images.dims[1], cols = s.images.dims[2];
  torch::Tensor pixels = torch::from_blob(s.images.data.data(), {n, 1, rows, cols}, torch::kUInt8);
  torch::Tensor labels = torch::from_blob(s.labels.data.data(), {n}, torch::kUInt8);
  // clone() and to() copy out of the vectors, which die with `s`.
  return {.images = pixels.clone(), .labels = labels.to(torch::kInt64)};
}

Dataset make_synthetic(const SyntheticOptions& o, Split split) {
  torch::NoGradGuard no_grad;
  auto mean_gen = at::make_generator<at::CPUGeneratorImpl>(mix(o.seed, 0));
  auto example_gen =
      at::make_generator<at::CPUGeneratorImpl>(mix(o.seed, split == Split::Train ? 1 : 2));
  const int64_t n = split == Split::Train ? o.samples : (o.samples + 4) / 5;
  std::vector<int64_t> mean_shape = {o.classes};
  mean_shape.insert(mean_shape.end(), o.shape.begin(), o.shape.end());
  torch::Tensor means = torch::randn(mean_shape, mean_gen);
  torch::Tensor labels = torch::randint(0, o.classes, {n}, example_gen, torch::kInt64);
  std::vector<int64_t> shape = {n};
  shape.insert(shape.end(), o.shape.begin(), o.shape.end());
  torch::Tensor images = torch::randn(shape, example_gen).add_(means.index_select(0, labels));
  return {.images = images, .labels = labels};
}

Dataset load_dataset(const DataConfig& data, Split split, uint64_t seed) {
  if (data.name == DatasetKind::Synthetic) {
    return make_synthetic(
        {.samples = data.samples, .shape = data.shape, .classes = data.classes, .seed = seed},
        split);
  }
  return load_idx_dataset(data.path, split);
}

}  // namespace cohort::train
