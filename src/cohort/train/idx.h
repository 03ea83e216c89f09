// IDX files, the format of MNIST and Fashion-MNIST (http://yann.lecun.com/exdb/mnist/): a
// big-endian header (magic 0x0000 08 <ndims>, then ndims u32 sizes) followed by unsigned bytes.
// Files may be gzipped (read through zlib's gzread, which also reads plain files).
// No libtorch here: dataset.h turns the bytes into tensors.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cohort/base/error.h"

namespace cohort::train {

// A data file is missing, corrupt, or does not match its companion. Names the file.
class DatasetError : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

enum class Split { Train, Test };

// "train-images-idx3-ubyte" / "t10k-labels-idx1-ubyte" and so on (without ".gz").
std::string idx_images_name(Split split);
std::string idx_labels_name(Split split);
// dir/base.gz if it exists, else dir/base if it exists, else nullopt.
std::optional<std::string> find_idx_file(const std::string& dir, const std::string& base);

struct IdxArray {
  std::vector<int64_t> dims;  // e.g. {60000, 28, 28}
  std::vector<uint8_t> data;  // product(dims) bytes, row-major
};

// Reads an unsigned-byte IDX file with exactly `ndims` dimensions. A wrong magic number, a
// truncated body, trailing bytes or an absurd size is a DatasetError naming `path`.
IdxArray read_idx(const std::string& path, int ndims);

// An image file and its label file for one split, checked against each other: equal counts,
// rows x cols as expected, every label below `classes`.
struct IdxSplit {
  IdxArray images;  // {N, rows, cols}
  IdxArray labels;  // {N}
};
IdxSplit read_idx_split(const std::string& dir, Split split, int64_t rows = 28, int64_t cols = 28,
                        int64_t classes = 10);

}  // namespace cohort::train
