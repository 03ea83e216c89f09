#include "cohort/train/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <cinttypes>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "cohort/base/bytes.h"
#include "cohort/base/checksum.h"
#include "cohort/base/clock.h"
#include "cohort/base/file.h"

namespace cohort::train {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'C', 'O', 'H', 'O', 'R', 'T', 'C', 'K'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 8 + 4 + 4 + 8 + 32;

struct Parsed {
  CheckpointMeta meta;
  const char* payload = nullptr;
  size_t payload_len = 0;
};

std::string tensor_shape(const torch::Tensor& t) {
  std::ostringstream s;
  s << t.sizes() << " " << t.dtype();
  return s.str();
}

// Module::load() rebinds each parameter to the storage it read; copying instead keeps every
// pointer into the parameters (optimizer state, DDP buckets, hooks) valid, and lets us name the
// tensor that does not fit.
void load_module(torch::nn::Module& module, torch::serialize::InputArchive& archive,
                 const std::string& prefix, const std::string& name) {
  auto restore = [&](const std::string& key, torch::Tensor& dst, bool is_buffer) {
    torch::Tensor src;
    if (!archive.try_read(key, src, is_buffer)) {
      throw CheckpointError(name + ": has no " + (is_buffer ? "buffer '" : "parameter '") + prefix +
                            key + "' (a checkpoint of another model?)");
    }
    if (!src.sizes().equals(dst.sizes()) || src.dtype() != dst.dtype()) {
      throw CheckpointError(name + ": '" + prefix + key + "' is " + tensor_shape(src) +
                            " in the checkpoint, " + tensor_shape(dst) + " in the model");
    }
    torch::NoGradGuard no_grad;
    dst.copy_(src);
  };
  for (auto& p : module.named_parameters(/*recurse=*/false)) restore(p.key(), p.value(), false);
  for (auto& b : module.named_buffers(/*recurse=*/false)) restore(b.key(), b.value(), true);
  for (auto& child : module.named_children()) {
    torch::serialize::InputArchive child_archive;
    if (!archive.try_read(child.key(), child_archive)) {
      throw CheckpointError(name + ": has no module '" + prefix + child.key() + "'");
    }
    load_module(*child.value(), child_archive, prefix + child.key() + ".", name);
  }
}

Parsed parse(const std::string& bytes, const std::string& name) {
  if (bytes.size() < kHeaderBytes) {
    throw CheckpointError(name + ": truncated: " + std::to_string(bytes.size()) +
                          " bytes, shorter than the " + std::to_string(kHeaderBytes) +
                          "-byte header");
  }
  ByteReader r(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  if (std::memcmp(r.get_bytes(8), kMagic, 8) != 0) {
    throw CheckpointError(name + ": not a Cohort checkpoint (bad magic)");
  }
  const auto version = r.get<uint32_t>();
  if (version != kVersion) {
    throw CheckpointError(name + ": checkpoint format version " + std::to_string(version) +
                          ", this build reads version " + std::to_string(kVersion));
  }
  const auto meta_len = r.get<uint32_t>();
  const auto payload_len = r.get<uint64_t>();
  Digest digest;
  std::memcpy(digest.data(), r.get_bytes(32), 32);
  const uint64_t expected = uint64_t{kHeaderBytes} + meta_len + payload_len;
  if (payload_len > bytes.size() || expected != bytes.size()) {
    throw CheckpointError(name + ": truncated or corrupt: the header promises " +
                          std::to_string(expected) + " bytes, the file has " +
                          std::to_string(bytes.size()));
  }
  const char* body = bytes.data() + kHeaderBytes;
  if (!digest_equal(digest, sha256(body, meta_len + payload_len))) {
    throw CheckpointError(name + ": corrupt: the SHA-256 checksum does not match the contents");
  }
  Parsed p;
  try {
    auto j = nlohmann::json::parse(body, body + meta_len);
    p.meta = {.step = j.at("step").get<int64_t>(),
              .epoch = j.at("epoch").get<int64_t>(),
              .consumed = j.at("consumed").get<int64_t>(),
              .world_size = j.at("world_size").get<int64_t>(),
              .seed = j.at("seed").get<uint64_t>(),
              .job = j.at("job").get<std::string>(),
              .time = j.at("time").get<double>()};
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(name + ": unreadable metadata: " + e.what());
  }
  p.payload = body + meta_len;
  p.payload_len = payload_len;
  return p;
}

}  // namespace

std::string encode_checkpoint(const CheckpointMeta& meta, torch::nn::Module& model,
                              torch::optim::Optimizer* optimizer,
                              const std::vector<std::string>& codec_states) {
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
  if (!codec_states.empty()) {
    torch::serialize::OutputArchive states;
    states.write("ranks", torch::tensor(static_cast<int64_t>(codec_states.size())), true);
    for (size_t r = 0; r < codec_states.size(); ++r) {
      auto bytes = torch::empty({static_cast<int64_t>(codec_states[r].size())}, torch::kUInt8);
      std::memcpy(bytes.data_ptr(), codec_states[r].data(), codec_states[r].size());
      states.write("rank_" + std::to_string(r), bytes, /*is_buffer=*/true);
    }
    archive.write("codec_states", states);
  }
  std::ostringstream payload_stream;
  archive.save_to(payload_stream);
  const std::string payload = payload_stream.str();

  const std::string m = nlohmann::json{
      {"format", "cohort-checkpoint"},
      {"step", meta.step},
      {"epoch", meta.epoch},
      {"consumed", meta.consumed},
      {"world_size", meta.world_size},
      {"seed", meta.seed},
      {"job", meta.job},
      {"time", meta.time}}.dump();
  std::string body = m + payload;
  Digest digest = sha256(body.data(), body.size());
  ByteWriter w;
  w.put_bytes(kMagic, 8)
      .put<uint32_t>(kVersion)
      .put<uint32_t>(static_cast<uint32_t>(m.size()))
      .put<uint64_t>(payload.size())
      .put_bytes(digest.data(), digest.size());
  const auto& head = w.bytes();
  return std::string(head.begin(), head.end()) + body;
}

CheckpointMeta verify_checkpoint(const std::string& bytes, const std::string& name) {
  return parse(bytes, name).meta;
}

CheckpointMeta decode_checkpoint(const std::string& bytes, const std::string& name,
                                 torch::nn::Module& model, torch::optim::Optimizer* optimizer,
                                 bool restore_rng, std::vector<std::string>* codec_states) {
  Parsed p = parse(bytes, name);
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(p.payload, p.payload_len);
    torch::serialize::InputArchive model_archive;
    if (!archive.try_read("model", model_archive)) throw CheckpointError(name + ": has no model");
    load_module(model, model_archive, "", name);
    if (optimizer) {
      torch::serialize::InputArchive optimizer_archive;
      if (!archive.try_read("optimizer", optimizer_archive)) {
        throw CheckpointError(name + ": has no optimizer state");
      }
      optimizer->load(optimizer_archive);
    }
    if (restore_rng) {
      torch::Tensor state;
      archive.read("rng_cpu", state, /*is_buffer=*/true);
      auto gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(state);
    }
    if (codec_states) {
      codec_states->clear();
      torch::serialize::InputArchive states;
      if (archive.try_read("codec_states", states)) {
        torch::Tensor ranks;
        states.read("ranks", ranks, true);
        for (int64_t r = 0; r < ranks.item<int64_t>(); ++r) {
          torch::Tensor b;
          states.read("rank_" + std::to_string(r), b, true);
          if (b.scalar_type() != torch::kUInt8 || b.dim() != 1) {
            throw CheckpointError(name + ": codec state of rank " + std::to_string(r) +
                                  " is not a byte string");
          }
          b = b.contiguous();
          codec_states->emplace_back(static_cast<const char*>(b.data_ptr()),
                                     static_cast<size_t>(b.numel()));
        }
      }
    }
  } catch (const c10::Error& e) {
    // The checksum matched, so this is a checkpoint of another model or optimizer.
    throw CheckpointError(name +
                          ": does not fit this model or optimizer: " + e.what_without_backtrace());
  }
  return p.meta;
}

void save_checkpoint(const fs::path& path, const CheckpointMeta& meta, torch::nn::Module& model,
                     torch::optim::Optimizer* optimizer,
                     const std::vector<std::string>& codec_states) {
  write_file_atomically(path, encode_checkpoint(meta, model, optimizer, codec_states));
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
                             torch::optim::Optimizer* optimizer,
                             const std::vector<std::string>& codec_states) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw SystemError("create checkpoint directory " + dir_.string(), ec.value());
  const fs::path path = path_for(meta.step);
  save_checkpoint(path, meta, model, optimizer, codec_states);
  auto files = list();
  for (size_t i = 0; i + static_cast<size_t>(keep_) < files.size(); ++i) {
    fs::remove(files[i].path, ec);
    if (ec)
      spdlog::warn("cannot remove old checkpoint {}: {}", files[i].path.string(), ec.message());
  }
  return path;
}

std::vector<CheckpointFile> CheckpointDir::list() const {
  static const std::regex pattern(R"(ckpt-(\d{1,18})\.cohort)");
  std::vector<CheckpointFile> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && std::regex_match(name, m, pattern)) {
      out.push_back({.path = entry.path(), .step = std::stoll(m[1].str())});
    }
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
