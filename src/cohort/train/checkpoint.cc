#include "cohort/train/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <cinttypes>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "cohort/base/bytes.h"
#include "cohort/base/checksum.h"
#include "cohort/base/clock.h"
#include "cohort/base/file.h"

namespace cohort::train {
namespace {

namespace fs = std::filesystem;

std::string tensor_shape(const torch::Tensor& t) {
  std::ostringstream s;
  s << t.sizes() << " " << t.dtype();
  return s.str();
}

// A tensor of the model and what the checkpoint holds for it, checked to fit.
struct Fit {
  torch::Tensor dst, src;
};

// Module::load() rebinds each parameter to the storage it read; copying instead keeps every
// pointer into the parameters (optimizer state, DDP buckets, hooks) valid, and lets us name the
// tensor that does not fit. Everything is read and checked here, nothing copied yet: a
// checkpoint that does not fit changes nothing.
void fit_module(torch::nn::Module& module, torch::serialize::InputArchive& archive,
                const std::string& prefix, const std::string& name, std::vector<Fit>& out) {
  auto fit = [&](const std::string& key, torch::Tensor& dst, bool is_buffer) {
    torch::Tensor src;
    if (!archive.try_read(key, src, is_buffer)) {
      throw CheckpointError(name + ": has no " + (is_buffer ? "buffer '" : "parameter '") + prefix +
                            key + "' (a checkpoint of another model?)");
    }
    if (!src.sizes().equals(dst.sizes()) || src.dtype() != dst.dtype()) {
      throw CheckpointError(name + ": '" + prefix + key + "' is " + tensor_shape(src) +
                            " in the checkpoint, " + tensor_shape(dst) + " in the model");
    }
    out.push_back({dst, src});
  };
  for (auto& p : module.named_parameters(/*recurse=*/false)) fit(p.key(), p.value(), false);
  for (auto& b : module.named_buffers(/*recurse=*/false)) fit(b.key(), b.value(), true);
  for (auto& child : module.named_children()) {
    torch::serialize::InputArchive child_archive;
    if (!archive.try_read(child.key(), child_archive)) {
      throw CheckpointError(name + ": has no module '" + prefix + child.key() + "'");
    }
    fit_module(*child.value(), child_archive, prefix + child.key() + ".", name, out);
  }
}

torch::Tensor byte_tensor(const std::string& bytes) {
  auto t = torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);
  if (!bytes.empty()) std::memcpy(t.data_ptr(), bytes.data(), bytes.size());  // may be null
  return t;
}

std::string byte_string(torch::Tensor t, const std::string& name, const std::string& what) {
  if (t.scalar_type() != torch::kUInt8 || t.dim() != 1) {
    throw CheckpointError(name + ": " + what + " is not a byte string");
  }
  t = t.contiguous();
  return {static_cast<const char*>(t.data_ptr()), static_cast<size_t>(t.numel())};
}

}  // namespace

std::string encode_checkpoint(const CheckpointMeta& meta, torch::nn::Module& model,
                              torch::optim::Optimizer* optimizer, const CheckpointExtras& extras) {
  torch::serialize::OutputArchive archive;
  torch::serialize::OutputArchive model_archive;
  model.save(model_archive);
  archive.write("model", model_archive);
  if (optimizer) {
    torch::serialize::OutputArchive optimizer_archive;
    optimizer->save(optimizer_archive);
    archive.write("optimizer", optimizer_archive);
  }
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    archive.write("rng_cpu", gen.get_state(), /*is_buffer=*/true);
  }
  const auto& codec_states = extras.codec_states;
  if (!codec_states.empty()) {
    torch::serialize::OutputArchive states;
    states.write("ranks", torch::tensor(static_cast<int64_t>(codec_states.size())), true);
    for (size_t r = 0; r < codec_states.size(); ++r) {
      states.write("rank_" + std::to_string(r), byte_tensor(codec_states[r]), /*is_buffer=*/true);
    }
    archive.write("codec_states", states);
  }
  if (!extras.sync_state.empty()) {
    archive.write("sync_state", byte_tensor(extras.sync_state), /*is_buffer=*/true);
  }
  if (!extras.train_state.empty()) {
    archive.write("train_state", byte_tensor(extras.train_state), /*is_buffer=*/true);
  }
  if (!extras.sync_mode.empty()) {
    archive.write("sync_mode", byte_tensor(extras.sync_mode), /*is_buffer=*/true);
  }
  std::ostringstream payload_stream;
  archive.save_to(payload_stream);
  const std::string payload = payload_stream.str();

  return frame_checkpoint(meta, payload);
}

CheckpointMeta verify_checkpoint(const std::string& bytes, const std::string& name) {
  return parse_checkpoint(bytes, name).meta;
}

CheckpointMeta decode_checkpoint(const std::string& bytes, const std::string& name,
                                 torch::nn::Module& model, torch::optim::Optimizer* optimizer,
                                 bool restore_rng, CheckpointExtras* extras) {
  CheckpointParts p = parse_checkpoint(bytes, name);
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(p.payload, p.payload_len);
    torch::serialize::InputArchive model_archive;
    if (!archive.try_read("model", model_archive)) throw CheckpointError(name + ": has no model");
    // Everything is read and checked first, then applied: a checkpoint that does not fit (another
    // model, no optimizer state, a malformed extra) leaves the model, the optimizer and the
    // generator as they were. Only the optimizer's own load (libtorch's) is not checked ahead.
    std::vector<Fit> fits;
    fit_module(model, model_archive, "", name, fits);
    torch::serialize::InputArchive optimizer_archive;
    if (optimizer && !archive.try_read("optimizer", optimizer_archive)) {
      throw CheckpointError(name + ": has no optimizer state");
    }
    torch::Tensor rng;
    if (restore_rng) archive.read("rng_cpu", rng, /*is_buffer=*/true);
    CheckpointExtras read;
    if (extras) {
      torch::serialize::InputArchive states;
      if (archive.try_read("codec_states", states)) {
        torch::Tensor ranks;
        states.read("ranks", ranks, true);
        for (int64_t r = 0; r < ranks.item<int64_t>(); ++r) {
          torch::Tensor b;
          states.read("rank_" + std::to_string(r), b, true);
          read.codec_states.push_back(
              byte_string(b, name, "codec state of rank " + std::to_string(r)));
        }
      }
      torch::Tensor sync;
      if (archive.try_read("sync_state", sync, /*is_buffer=*/true)) {
        read.sync_state = byte_string(sync, name, "the synchronization mode's state");
      }
      torch::Tensor train;
      if (archive.try_read("train_state", train, /*is_buffer=*/true)) {
        read.train_state = byte_string(train, name, "the committed sample counts");
      }
      torch::Tensor mode;
      if (archive.try_read("sync_mode", mode, /*is_buffer=*/true)) {
        read.sync_mode = byte_string(mode, name, "the synchronization mode");
      }
    }
    if (optimizer) optimizer->load(optimizer_archive);
    {
      torch::NoGradGuard no_grad;
      for (Fit& f : fits) f.dst.copy_(f.src);
    }
    if (restore_rng) {
      auto gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(rng);
    }
    if (extras) *extras = std::move(read);
  } catch (const c10::Error& e) {
    // The checksum matched, so this is a checkpoint of another model or optimizer.
    throw CheckpointError(name +
                          ": does not fit this model or optimizer: " + e.what_without_backtrace());
  }
  return p.meta;
}

void save_checkpoint(const fs::path& path, const CheckpointMeta& meta, torch::nn::Module& model,
                     torch::optim::Optimizer* optimizer, const CheckpointExtras& extras) {
  write_file_atomically(path, encode_checkpoint(meta, model, optimizer, extras));
}

CheckpointMeta load_checkpoint(const fs::path& path, torch::nn::Module& model,
                               torch::optim::Optimizer* optimizer, bool restore_rng) {
  return decode_checkpoint(read_file(path), path.string(), model, optimizer, restore_rng);
}

CheckpointMeta read_checkpoint_meta(const fs::path& path) {
  return verify_checkpoint(read_file(path), path.string());
}

CheckpointDir::CheckpointDir(fs::path dir, int64_t keep) : dir_(std::move(dir)), keep_(keep) {
  if (keep_ < 1) throw ConfigError("checkpoint.keep must be at least 1");
}

fs::path CheckpointDir::path_for(int64_t step) const {
  char name[64];
  std::snprintf(name, sizeof(name), "ckpt-%012" PRId64 ".cohort", step);
  return dir_ / name;
}

fs::path CheckpointDir::save(const CheckpointMeta& meta, torch::nn::Module& model,
                             torch::optim::Optimizer* optimizer, const CheckpointExtras& extras) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw SystemError("create checkpoint directory " + dir_.string(), ec.value());
  const fs::path path = path_for(meta.step);
  save_checkpoint(path, meta, model, optimizer, extras);
  // Rotation counts this checkpoint and the ones before it: files of later steps are what a run
  // resumed from an older checkpoint found corrupt (they are replaced as their steps come), and
  // counting them would delete this one and the one it resumed from.
  auto files = list();
  std::erase_if(files, [&](const CheckpointFile& f) { return f.step > meta.step; });
  for (size_t i = 0; i + static_cast<size_t>(keep_) < files.size(); ++i) {
    fs::remove(files[i].path, ec);
    if (ec)
      spdlog::warn("cannot remove old checkpoint {}: {}", files[i].path.string(), ec.message());
  }
  return path;
}

std::vector<CheckpointFile> CheckpointDir::list() const {
  // ckpt-<1 to 18 digits>.cohort (without std::regex: GCC warns inside <regex> under ASan).
  auto step_of = [](const std::string& name) -> std::optional<int64_t> {
    constexpr std::string_view kPrefix = "ckpt-", kSuffix = ".cohort";
    if (name.size() <= kPrefix.size() + kSuffix.size() || !name.starts_with(kPrefix) ||
        !name.ends_with(kSuffix)) {
      return std::nullopt;
    }
    const std::string digits =
        name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
    if (digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos) {
      return std::nullopt;
    }
    return std::stoll(digits);
  };
  std::vector<CheckpointFile> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const auto step = step_of(entry.path().filename().string());
    if (entry.is_regular_file() && step) out.push_back({.path = entry.path(), .step = *step});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return out;
}

std::optional<CheckpointFile> CheckpointDir::newest_valid(std::vector<std::string>* skipped) const {
  auto files = list();
  for (auto it = files.rbegin(); it != files.rend(); ++it) {
    try {
      read_checkpoint_meta(it->path);
      return *it;
    } catch (const Error& e) {  // CheckpointError, or SystemError when it cannot be read
      spdlog::warn("skipping checkpoint: {}", e.what());
      if (skipped) skipped->push_back(e.what());
    }
  }
  return std::nullopt;
}

}  // namespace cohort::train
