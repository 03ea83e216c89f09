// What the compressing collectives need to know about a compact format of f32 data (IEEE half,
// bfloat16, int8 with a scale per chunk, ...): how many bytes a run of values takes, how to encode
// it, and how to decode it or add it into an f32 accumulator. The formats themselves live in
// compress/; the communication core only moves and sums what they produce.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "cohort/base/dtype.h"

namespace cohort::comm {

class Encoding {
 public:
  virtual ~Encoding() = default;
  // Tags the wire headers, so that ranks using different formats (or parameters) fail with a
  // ProtocolError instead of misreading each other's bytes. Nonzero.
  virtual uint32_t wire_tag() const = 0;
  virtual std::string_view name() const = 0;
  // One encode() of n values writes encoded_bytes(n) bytes, independent of any other call.
  // Collectives cut buffers into runs of a multiple of granule() values (e.g. a format's chunk).
  virtual size_t granule() const { return 1; }
  virtual size_t encoded_bytes(size_t count) const = 0;
  // May be stateful (e.g. a random stream for stochastic rounding); called on the thread that runs
  // the collective, one call at a time.
  virtual void encode(const float* src, size_t count, uint8_t* dst) = 0;
  virtual void decode(const uint8_t* src, size_t count, float* dst) const = 0;
  // acc[i] += decoded value i.
  virtual void decode_add(const uint8_t* src, size_t count, float* acc) const = 0;
};

// The result of allgatherv: rank r's block is counts[r] elements of `dtype` at element offset
// offsets[r] of data.
struct GatheredBlocks {
  DType dtype = DType::F32;
  std::vector<uint8_t> data;
  std::vector<size_t> counts;
  std::vector<size_t> offsets;

  const uint8_t* block(int r) const {
    return data.data() + offsets[static_cast<size_t>(r)] * dtype_size(dtype);
  }
};

}  // namespace cohort::comm
