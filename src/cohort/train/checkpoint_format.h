// The checkpoint file format without the tensors: its header, checksum and metadata (see
// checkpoint.h for the layout). Kept apart from libtorch so that the part of a checkpoint that
// is read before anything trusts it builds and is tested (and fuzzed) on its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "cohort/base/error.h"

namespace cohort::train {

// A checkpoint is truncated, corrupt, of another format, or does not fit the model.
class CheckpointError : public Error {
 public:
  using Error::Error;
};

struct CheckpointMeta {
  int64_t step = 0;      // optimizer steps completed
  int64_t epoch = 0;     // DistributedSampler position: epoch ...
  int64_t consumed = 0;  // ... and samples of it consumed by all ranks together
  int64_t world_size = 1;
  uint64_t seed = 0;
  std::string job = "";
  double time = 0;  // wall-clock seconds since the Unix epoch when written
  bool operator==(const CheckpointMeta&) const = default;
};

// A verified checkpoint's metadata and where its payload (the libtorch archive) lies in `bytes`.
struct CheckpointParts {
  CheckpointMeta meta;
  const char* payload = nullptr;
  size_t payload_len = 0;
};

// Checks the header (magic, version, lengths against the bytes there are) and the SHA-256 before
// reading the metadata; throws CheckpointError naming `name` and what is wrong.
CheckpointParts parse_checkpoint(const std::string& bytes, const std::string& name);
// Header, checksum and metadata around `payload`: the bytes of a checkpoint file.
std::string frame_checkpoint(const CheckpointMeta& meta, const std::string& payload);

}  // namespace cohort::train
