#include "cohort/compress/formats.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "cohort/base/error.h"
#include "cohort/comm/half.h"

namespace cohort::compress {
namespace {

constexpr float kHalfMax = 65504.0f;

uint16_t load16(const uint8_t* p, size_t i) {
  uint16_t v;
  std::memcpy(&v, p + 2 * i, 2);
  return v;
}
void store16(uint8_t* p, size_t i, uint16_t v) {
  std::memcpy(p + 2 * i, &v, 2);
}

// splitmix64: a counter-based generator (one well-mixed word per counter value).
uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

void Fp16Encoding::encode(const float* src, size_t count, uint8_t* dst) {
  for (size_t i = 0; i < count; ++i) {
    float v = src[i];
    if (v > kHalfMax) v = kHalfMax;  // NaN compares false and stays NaN
    if (v < -kHalfMax) v = -kHalfMax;
    store16(dst, i, comm::f32_to_f16(v));
  }
}

void Fp16Encoding::decode(const uint8_t* src, size_t count, float* dst) const {
  for (size_t i = 0; i < count; ++i) dst[i] = comm::f16_to_f32(load16(src, i));
}

void Fp16Encoding::decode_add(const uint8_t* src, size_t count, float* acc) const {
  for (size_t i = 0; i < count; ++i) acc[i] += comm::f16_to_f32(load16(src, i));
}

void Bf16Encoding::encode(const float* src, size_t count, uint8_t* dst) {
  for (size_t i = 0; i < count; ++i) store16(dst, i, comm::f32_to_bf16(src[i]));
}

void Bf16Encoding::decode(const uint8_t* src, size_t count, float* dst) const {
  for (size_t i = 0; i < count; ++i) dst[i] = comm::bf16_to_f32(load16(src, i));
}

void Bf16Encoding::decode_add(const uint8_t* src, size_t count, float* acc) const {
  for (size_t i = 0; i < count; ++i) acc[i] += comm::bf16_to_f32(load16(src, i));
}

Int8Encoding::Int8Encoding(size_t chunk, bool stochastic, uint64_t seed)
    : chunk_(chunk), stochastic_(stochastic), seed_(seed) {
  if (chunk_ == 0 || chunk_ > (1u << 20)) {
    throw ConfigError("int8 encoding: chunk must be in [1, 1048576], got " + std::to_string(chunk));
  }
}

size_t Int8Encoding::encoded_bytes(size_t count) const {
  return (count + chunk_ - 1) / chunk_ * sizeof(float) + count;
}

void Int8Encoding::encode(const float* src, size_t count, uint8_t* dst) {
  const size_t chunks = (count + chunk_ - 1) / chunk_;
  uint8_t* scales = dst;
  auto* q = reinterpret_cast<int8_t*>(dst + chunks * sizeof(float));
  const uint64_t stream = mix(seed_ ^ mix(calls_++));
  for (size_t c = 0; c < chunks; ++c) {
    const size_t lo = c * chunk_, hi = std::min(count, lo + chunk_);
    float amax = 0.0f;
    bool finite = true;
    for (size_t i = lo; i < hi; ++i) {
      const float a = std::fabs(src[i]);
      finite = finite && std::isfinite(a);
      amax = std::max(amax, a);
    }
    float scale = finite ? amax / 127.0f : std::numeric_limits<float>::quiet_NaN();
    std::memcpy(scales + c * sizeof(float), &scale, sizeof(float));
    if (!(scale > 0.0f)) {  // all zeros, or not finite: the bytes do not matter
      std::memset(q + lo, 0, hi - lo);
      continue;
    }
    const float inv = 127.0f / amax;
    for (size_t i = lo; i < hi; ++i) {
      const float v = src[i] * inv;
      float r;
      if (stochastic_) {
        // u in [0, 1) from the top 24 bits: floor(v + u) rounds up with probability frac(v).
        const float u = static_cast<float>(mix(stream + i) >> 40) * 0x1p-24f;
        r = std::floor(v + u);
      } else {
        r = std::nearbyint(v);
      }
      q[i] = static_cast<int8_t>(std::clamp(r, -127.0f, 127.0f));
    }
  }
}

template <bool Add>
void Int8Encoding::decode_impl(const uint8_t* src, size_t count, float* dst) const {
  const size_t chunks = (count + chunk_ - 1) / chunk_;
  const auto* q = reinterpret_cast<const int8_t*>(src + chunks * sizeof(float));
  for (size_t c = 0; c < chunks; ++c) {
    float scale;
    std::memcpy(&scale, src + c * sizeof(float), sizeof(float));
    const size_t lo = c * chunk_, hi = std::min(count, lo + chunk_);
    for (size_t i = lo; i < hi; ++i) {
      const float v = static_cast<float>(q[i]) * scale;
      if constexpr (Add) {
        dst[i] += v;
      } else {
        dst[i] = v;
      }
    }
  }
}

void Int8Encoding::decode(const uint8_t* src, size_t count, float* dst) const {
  decode_impl<false>(src, count, dst);
}

void Int8Encoding::decode_add(const uint8_t* src, size_t count, float* acc) const {
  decode_impl<true>(src, count, acc);
}

}  // namespace cohort::compress
