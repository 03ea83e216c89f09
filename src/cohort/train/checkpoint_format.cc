#include "cohort/train/checkpoint_format.h"

#include <cstring>
#include <nlohmann/json.hpp>

#include "cohort/base/bytes.h"
#include "cohort/base/checksum.h"

namespace cohort::train {
namespace {

constexpr char kMagic[8] = {'C', 'O', 'H', 'O', 'R', 'T', 'C', 'K'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 8 + 4 + 4 + 8 + 32;

}  // namespace

CheckpointParts parse_checkpoint(const std::string& bytes, const std::string& name) {
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
  CheckpointParts p;
  try {
    auto j = nlohmann::json::parse(body, body + meta_len);
    // Integers must be integers: nlohmann converts a float (1e19) to int64 unchecked.
    auto integer = [&](const char* key) -> const nlohmann::json& {
      const auto& v = j.at(key);
      if (!v.is_number_integer()) {
        throw CheckpointError(name + ": unreadable metadata: " + key + " is not an integer");
      }
      return v;
    };
    const auto& seed = integer("seed");
    if (!seed.is_number_unsigned() && seed.get<int64_t>() < 0) {
      throw CheckpointError(name + ": unreadable metadata: seed is negative");
    }
    p.meta = {.step = integer("step").get<int64_t>(),
              .epoch = integer("epoch").get<int64_t>(),
              .consumed = integer("consumed").get<int64_t>(),
              .world_size = integer("world_size").get<int64_t>(),
              .seed = seed.get<uint64_t>(),
              .job = j.at("job").get<std::string>(),
              .time = j.at("time").get<double>()};
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(name + ": unreadable metadata: " + e.what());
  }
  p.payload = body + meta_len;
  p.payload_len = payload_len;
  return p;
}

std::string frame_checkpoint(const CheckpointMeta& meta, const std::string& payload) {
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

}  // namespace cohort::train
