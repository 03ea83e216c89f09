// The checkpoint file format (train/checkpoint_format.h) on any file: a header whose lengths fit
// the bytes, a checksum that matches, metadata that parses - or a CheckpointError that names the
// file. Never a crash, and nothing read past the bytes there are. Most inputs are wrapped in a
// valid header and checksum first (the first byte picks), so that the fuzzer gets past the
// SHA-256 to the metadata, as a file written by a buggy or hostile writer would. What parses is
// framed again and must parse to the same metadata and payload. (The payload, a libtorch
// archive, is read by libtorch only once the checksum has matched.)
#include <cstdint>
#include <cstring>
#include <string>

#include "cohort/base/bytes.h"
#include "cohort/base/checksum.h"
#include "cohort/train/checkpoint_format.h"

namespace {

// magic | version | meta length | payload length | SHA-256 | meta | payload, as the writer does.
std::string wrap(const uint8_t* data, size_t size) {
  if (size < 2) return std::string(reinterpret_cast<const char*>(data), size);
  const size_t meta_len = std::min<size_t>(data[0] * 8u, size - 1);
  const char* body = reinterpret_cast<const char*>(data + 1);
  const size_t body_len = size - 1;
  cohort::Digest d = cohort::sha256(body, body_len);
  cohort::ByteWriter w;
  w.put_bytes("COHORTCK", 8)
      .put<uint32_t>(1)
      .put<uint32_t>(static_cast<uint32_t>(meta_len))
      .put<uint64_t>(body_len - meta_len)
      .put_bytes(d.data(), d.size());
  return std::string(w.bytes().begin(), w.bytes().end()) + std::string(body, body_len);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cohort::train;
  if (size == 0) return 0;
  const std::string bytes = data[0] & 1
                                ? std::string(reinterpret_cast<const char*>(data + 1), size - 1)
                                : wrap(data + 1, size - 1);
  try {
    const CheckpointParts p = parse_checkpoint(bytes, "fuzz.cohort");
    if (p.payload < bytes.data() || p.payload + p.payload_len > bytes.data() + bytes.size()) {
      __builtin_trap();
    }
    const std::string again = frame_checkpoint(p.meta, std::string(p.payload, p.payload_len));
    const CheckpointParts q = parse_checkpoint(again, "again");
    if (!(q.meta == p.meta) || q.payload_len != p.payload_len ||
        std::memcmp(q.payload, p.payload, p.payload_len) != 0) {
      __builtin_trap();
    }
  } catch (const CheckpointError& e) {
    if (std::string(e.what()).rfind("fuzz.cohort", 0) != 0) __builtin_trap();
  }
  return 0;
}
