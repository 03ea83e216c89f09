// Compact formats of f32 data for the wire (comm::Encoding): IEEE half, bfloat16, and int8 with
// one f32 scale per chunk. Each documents the error of one encode/decode round trip.
#pragma once

#include <cstdint>

#include "cohort/comm/encoding.h"

namespace cohort::compress {

// IEEE binary16, round to nearest even. Relative error <= 2^-11 for |x| in [2^-14, 65504];
// below that absolute error <= 2^-25 (subnormals). Finite values beyond +-65504 saturate to
// +-65504 (no infinities from finite gradients; error feedback carries the excess); an infinity
// stays an infinity and NaN stays NaN, so an overflow is still seen after the exchange.
class Fp16Encoding final : public comm::Encoding {
 public:
  uint32_t wire_tag() const override { return 1; }
  std::string_view name() const override { return "fp16"; }
  size_t encoded_bytes(size_t count) const override { return 2 * count; }
  void encode(const float* src, size_t count, uint8_t* dst) override;
  void decode(const uint8_t* src, size_t count, float* dst) const override;
  void decode_add(const uint8_t* src, size_t count, float* acc) const override;
};

// bfloat16 (the top 16 bits of an f32), round to nearest even: relative error <= 2^-8, the f32
// range, NaN stays NaN.
class Bf16Encoding final : public comm::Encoding {
 public:
  uint32_t wire_tag() const override { return 2; }
  std::string_view name() const override { return "bf16"; }
  size_t encoded_bytes(size_t count) const override { return 2 * count; }
  void encode(const float* src, size_t count, uint8_t* dst) override;
  void decode(const uint8_t* src, size_t count, float* dst) const override;
  void decode_add(const uint8_t* src, size_t count, float* acc) const override;
};

// int8 with one f32 scale per chunk of `chunk` values: scale = max|x| / 127 over the chunk, and
// q = x / scale rounded to an integer in [-127, 127]. Layout of one encode of n values: the
// ceil(n / chunk) scales, then the n bytes. Error per value: < scale with stochastic rounding
// (which is unbiased: E[decode] == x), <= scale / 2 with round-to-nearest. A chunk holding a
// NaN or an infinity decodes as NaN. Stochastic rounding draws from a counter-based stream of
// `seed`: two encodings with the same seed and the same calls give the same bytes.
class Int8Encoding final : public comm::Encoding {
 public:
  Int8Encoding(size_t chunk, bool stochastic, uint64_t seed);
  uint32_t wire_tag() const override { return 3u | static_cast<uint32_t>(chunk_ << 8); }
  std::string_view name() const override { return "int8"; }
  size_t granule() const override { return chunk_; }
  size_t encoded_bytes(size_t count) const override;
  void encode(const float* src, size_t count, uint8_t* dst) override;
  void decode(const uint8_t* src, size_t count, float* dst) const override;
  void decode_add(const uint8_t* src, size_t count, float* acc) const override;
  size_t chunk() const { return chunk_; }
  // Where the rounding stream stands: encodings with the same seed and the same calls() encode
  // alike from here on (a codec's checkpointed state).
  uint64_t calls() const { return calls_; }
  void set_calls(uint64_t calls) { calls_ = calls; }

 private:
  size_t chunk_;
  bool stochastic_;
  uint64_t seed_;
  uint64_t calls_ = 0;
};

}  // namespace cohort::compress
