// Checkpoints: everything needed to continue a job exactly where it stopped, in one file.
//
// Layout (little-endian):
//   0   magic "COHORTCK"
//   8   u32 format version (1)
//   12  u32 metadata length M
//   16  u64 payload length P
//   24  SHA-256 of the M + P bytes that follow
//   56  metadata: JSON (step, epoch, consumed, world_size, seed, job, time)
//   56+M payload: a libtorch archive with the model's parameters and buffers ("model"), the
//       optimizer's state ("optimizer", e.g. momentum buffers), the CPU generator ("rng_cpu"),
//       for a job with gradient compression every rank's codec state ("codec_states": "ranks"
//       and "rank_<r>" as bytes, ddp::DistributedDataParallel::codec_state) and, for a
//       synchronization mode that keeps state of its own, that state ("sync_state", bytes:
//       SyncMode::save_state, e.g. local SGD's outer momentum)
//
// Files are written atomically (temporary file in the same directory, fsync, rename, fsync of the
// directory), so a crash leaves the previous checkpoint or the new one, never a torn file; a file
// damaged afterwards fails its checksum and is reported, naming the file. Restored tensors are
// copied into the model's existing parameters, so references to them (optimizer, DDP buckets and
// hooks) stay valid.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/train/checkpoint_format.h"

namespace cohort::train {

// What a checkpoint holds besides the model, the optimizer and the generator.
struct CheckpointExtras {
  std::vector<std::string> codec_states;  // one opaque string per rank; empty: none
  std::string sync_state;                 // the synchronization mode's; empty: none
  std::string sync_mode;                  // whose sync_state it is ("ssp", ...); empty: unknown
  // The committed sample counts of every epoch (TrainState as JSON), so that a job resumed from
  // the file still proves that each sample of an epoch was trained on once; empty: none.
  std::string train_state;
  bool operator==(const CheckpointExtras&) const = default;
};

// The bytes of a checkpoint (the same as a file's), e.g. for an in-memory snapshot sent to a peer.
// `optimizer` may be null (then none is stored, and none may be restored).
std::string encode_checkpoint(const CheckpointMeta& meta, torch::nn::Module& model,
                              torch::optim::Optimizer* optimizer,
                              const CheckpointExtras& extras = {});
// Verifies and restores into `model` (and `optimizer`, and the CPU generator when restore_rng);
// the extras go to *extras when given (empty fields for a checkpoint without them).
// `name` (a file name) is used in errors.
CheckpointMeta decode_checkpoint(const std::string& bytes, const std::string& name,
                                 torch::nn::Module& model, torch::optim::Optimizer* optimizer,
                                 bool restore_rng = true, CheckpointExtras* extras = nullptr);
// Verifies the checksum and returns the metadata without touching any model.
CheckpointMeta verify_checkpoint(const std::string& bytes, const std::string& name);

void save_checkpoint(const std::filesystem::path& path, const CheckpointMeta& meta,
                     torch::nn::Module& model, torch::optim::Optimizer* optimizer,
                     const CheckpointExtras& extras = {});
CheckpointMeta load_checkpoint(const std::filesystem::path& path, torch::nn::Module& model,
                               torch::optim::Optimizer* optimizer, bool restore_rng = true);
CheckpointMeta read_checkpoint_meta(const std::filesystem::path& path);

struct CheckpointFile {
  std::filesystem::path path;
  int64_t step = 0;
};

// A directory of checkpoints named ckpt-<step, 12 digits>.cohort, of which the newest `keep`
// are kept.
class CheckpointDir {
 public:
  CheckpointDir(std::filesystem::path dir, int64_t keep);

  // Writes the checkpoint of meta.step (creating the directory), then deletes the oldest beyond
  // `keep`. Returns the file's path.
  std::filesystem::path save(const CheckpointMeta& meta, torch::nn::Module& model,
                             torch::optim::Optimizer* optimizer,
                             const CheckpointExtras& extras = {});
  // Checkpoint files by ascending step (names only; nothing is verified).
  std::vector<CheckpointFile> list() const;
  // The newest checkpoint whose checksum verifies. Corrupt ones are skipped with a warning in the
  // log and, if `skipped` is given, their errors appended to it.
  std::optional<CheckpointFile> newest_valid(std::vector<std::string>* skipped = nullptr) const;
  std::filesystem::path path_for(int64_t step) const;
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
  int64_t keep_;
};

}  // namespace cohort::train
