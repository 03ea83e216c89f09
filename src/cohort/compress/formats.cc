// The kernels are plain loops that GCC vectorises at -O3; each is compiled twice, for AVX2 (with
// F16C for half precision) and for the baseline ISA, and the AVX2 copy is picked at run time on
// CPUs that have it (the same explicit check as comm/reduce.cc, for the same reason: no ifunc).
#include "cohort/compress/formats.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "cohort/base/cpu_features.h"
#include "cohort/base/error.h"
#include "cohort/comm/half.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define COHORT_X86 1
#else
#define COHORT_X86 0
#endif

namespace cohort::compress {
namespace {

#define COHORT_INLINE inline __attribute__((always_inline))

constexpr float kHalfMax = 65504.0f;

bool have_avx2_f16c() {
  return cpu_has_avx2() && cpu_has_f16c() && cpu_has_fma();
}

// splitmix64: one well-mixed word per counter value (seeds the stream of one encode call).
uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A 32-bit counter-based hash (lowbias32) per value: 32-bit multiplies vectorise.
COHORT_INLINE uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

// Largest |x| over n values as f32 bits (non-negative floats order like their bits); a result
// >= 0x7f800000 means a NaN or an infinity is among them.
COHORT_INLINE uint32_t amax_bits(const float* x, size_t n) {
  uint32_t m = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t b;
    std::memcpy(&b, &x[i], 4);
    b &= 0x7fffffffu;
    m = b > m ? b : m;
  }
  return m;
}

template <bool Stochastic>
COHORT_INLINE void quantize(const float* x, size_t n, float inv, uint32_t stream, uint32_t first,
                            int8_t* q) {
  for (size_t i = 0; i < n; ++i) {
    const float v = x[i] * inv;
    float r;
    if constexpr (Stochastic) {
      // u in [0, 1) from the top 24 bits: floor(v + u) rounds up with probability frac(v).
      const uint32_t h = mix32(stream + first + static_cast<uint32_t>(i));
      const float u = static_cast<float>(h >> 8) * 0x1p-24f;
      r = std::floor(v + u);
    } else {
      r = std::nearbyint(v);
    }
    r = r < -127.0f ? -127.0f : (r > 127.0f ? 127.0f : r);
    q[i] = static_cast<int8_t>(static_cast<int32_t>(r));
  }
}

template <bool Add>
COHORT_INLINE void dequantize(const int8_t* q, size_t n, float scale, float* dst) {
  for (size_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(q[i]) * scale;
    if constexpr (Add) {
      dst[i] += v;
    } else {
      dst[i] = v;
    }
  }
}

COHORT_INLINE void bf16_encode(const float* src, size_t n, uint16_t* dst) {
  for (size_t i = 0; i < n; ++i) dst[i] = comm::f32_to_bf16(src[i]);
}
template <bool Add>
COHORT_INLINE void bf16_decode(const uint16_t* src, size_t n, float* dst) {
  for (size_t i = 0; i < n; ++i) {
    const float v = comm::bf16_to_f32(src[i]);
    if constexpr (Add) {
      dst[i] += v;
    } else {
      dst[i] = v;
    }
  }
}

// Defines name(...) running `body` compiled for AVX2+F16C or for the baseline ISA.
#if COHORT_X86
#define COHORT_DISPATCH(name, params, args, body)                    \
  __attribute__((target("avx2,f16c,fma"))) void name##_avx2 params { \
    body;                                                            \
  }                                                                  \
  void name##_base params {                                          \
    body;                                                            \
  }                                                                  \
  void name params {                                                 \
    if (have_avx2_f16c()) return name##_avx2 args;                   \
    name##_base args;                                                \
  }
#else
#define COHORT_DISPATCH(name, params, args, body) \
  void name params {                              \
    body;                                         \
  }
#endif

COHORT_DISPATCH(amax, (const float* x, size_t n, uint32_t* out), (x, n, out),
                (*out = amax_bits(x, n)))
#if COHORT_X86
// quantize() 8 values at a time (GCC does not vectorise the loop on its own: the int8 stores
// and the hash defeat it); the tail goes through the scalar loop, which computes the same values.
template <bool Stochastic>
__attribute__((target("avx2,f16c,fma"))) void quantize_avx2(const float* x, size_t n, float inv,
                                                            uint32_t stream, uint32_t first,
                                                            int8_t* q) {
  const __m256 vinv = _mm256_set1_ps(inv), lo = _mm256_set1_ps(-127.0f),
               hi = _mm256_set1_ps(127.0f), unit = _mm256_set1_ps(0x1p-24f);
  __m256i idx = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(stream + first)),
                                 _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const __m256i eight = _mm256_set1_epi32(8);
  const __m256i c1 = _mm256_set1_epi32(0x7feb352d), c2 = _mm256_set1_epi32(0x846ca68bu);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vinv);
    __m256 r;
    if constexpr (Stochastic) {
      __m256i h = idx;
      h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
      h = _mm256_mullo_epi32(h, c1);
      h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 15));
      h = _mm256_mullo_epi32(h, c2);
      h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
      const __m256 u = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(h, 8)), unit);
      r = _mm256_floor_ps(_mm256_add_ps(v, u));
      idx = _mm256_add_epi32(idx, eight);
    } else {
      r = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    }
    r = _mm256_min_ps(_mm256_max_ps(r, lo), hi);
    const __m256i ri = _mm256_cvtps_epi32(r);
    const __m128i p16 =
        _mm_packs_epi32(_mm256_castsi256_si128(ri), _mm256_extracti128_si256(ri, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(q + i), _mm_packs_epi16(p16, p16));
  }
  quantize<Stochastic>(x + i, n - i, inv, stream, first + static_cast<uint32_t>(i), q + i);
}
#endif

template <bool Stochastic>
void quantize_any(const float* x, size_t n, float inv, uint32_t stream, uint32_t first, int8_t* q) {
#if COHORT_X86
  if (have_avx2_f16c()) return quantize_avx2<Stochastic>(x, n, inv, stream, first, q);
#endif
  quantize<Stochastic>(x, n, inv, stream, first, q);
}
COHORT_DISPATCH(dequantize_set, (const int8_t* q, size_t n, float scale, float* d),
                (q, n, scale, d), (dequantize<false>(q, n, scale, d)))
COHORT_DISPATCH(dequantize_add, (const int8_t* q, size_t n, float scale, float* d),
                (q, n, scale, d), (dequantize<true>(q, n, scale, d)))
COHORT_DISPATCH(bf16_enc, (const float* s, size_t n, uint16_t* d), (s, n, d),
                (bf16_encode(s, n, d)))
COHORT_DISPATCH(bf16_dec_set, (const uint16_t* s, size_t n, float* d), (s, n, d),
                (bf16_decode<false>(s, n, d)))
COHORT_DISPATCH(bf16_dec_add, (const uint16_t* s, size_t n, float* d), (s, n, d),
                (bf16_decode<true>(s, n, d)))

// Half precision: F16C, 8 values at a time, where the CPU has it (the tail through a padded copy,
// so that every value rounds the same way); the portable conversions of comm/half.h otherwise.
float saturate(float v) {
  if (std::isinf(v)) return v;
  return v > kHalfMax ? kHalfMax : (v < -kHalfMax ? -kHalfMax : v);
}

#if COHORT_X86
__attribute__((target("avx2,f16c"))) void f16_encode_f16c(const float* src, size_t n,
                                                          uint16_t* dst) {
  const __m256 hi = _mm256_set1_ps(kHalfMax), lo = _mm256_set1_ps(-kHalfMax);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 pos_inf = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(src + i);
    // min/max return their second operand (x) when either is NaN: NaN stays NaN; an infinity
    // is kept as it is, finite values saturate.
    const __m256 inf = _mm256_cmp_ps(_mm256_andnot_ps(sign, x), pos_inf, _CMP_EQ_OQ);
    const __m256 v = _mm256_blendv_ps(_mm256_max_ps(lo, _mm256_min_ps(hi, x)), x, inf);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  if (i < n) {
    float t[8] = {};
    uint16_t h[8];
    std::memcpy(t, src + i, (n - i) * 4);
    f16_encode_f16c(t, 8, h);
    std::memcpy(dst + i, h, (n - i) * 2);
  }
}

template <bool Add>
__attribute__((target("avx2,f16c"))) void f16_decode_f16c(const uint16_t* src, size_t n,
                                                          float* dst) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    if constexpr (Add) v = _mm256_add_ps(v, _mm256_loadu_ps(dst + i));
    _mm256_storeu_ps(dst + i, v);
  }
  for (; i < n; ++i) {
    const float v = _cvtsh_ss(src[i]);
    if constexpr (Add) {
      dst[i] += v;
    } else {
      dst[i] = v;
    }
  }
}
#endif

}  // namespace

void Fp16Encoding::encode(const float* src, size_t count, uint8_t* dst) {
  auto* h = reinterpret_cast<uint16_t*>(dst);
#if COHORT_X86
  if (have_avx2_f16c()) return f16_encode_f16c(src, count, h);
#endif
  for (size_t i = 0; i < count; ++i) h[i] = comm::f32_to_f16(saturate(src[i]));
}

void Fp16Encoding::decode(const uint8_t* src, size_t count, float* dst) const {
  const auto* h = reinterpret_cast<const uint16_t*>(src);
#if COHORT_X86
  if (have_avx2_f16c()) return f16_decode_f16c<false>(h, count, dst);
#endif
  for (size_t i = 0; i < count; ++i) dst[i] = comm::f16_to_f32(h[i]);
}

void Fp16Encoding::decode_add(const uint8_t* src, size_t count, float* acc) const {
  const auto* h = reinterpret_cast<const uint16_t*>(src);
#if COHORT_X86
  if (have_avx2_f16c()) return f16_decode_f16c<true>(h, count, acc);
#endif
  for (size_t i = 0; i < count; ++i) acc[i] += comm::f16_to_f32(h[i]);
}

void Bf16Encoding::encode(const float* src, size_t count, uint8_t* dst) {
  bf16_enc(src, count, reinterpret_cast<uint16_t*>(dst));
}

void Bf16Encoding::decode(const uint8_t* src, size_t count, float* dst) const {
  bf16_dec_set(reinterpret_cast<const uint16_t*>(src), count, dst);
}

void Bf16Encoding::decode_add(const uint8_t* src, size_t count, float* acc) const {
  bf16_dec_add(reinterpret_cast<const uint16_t*>(src), count, acc);
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
  const auto stream = static_cast<uint32_t>(mix64(seed_ ^ mix64(calls_++)));
  for (size_t c = 0; c < chunks; ++c) {
    const size_t lo = c * chunk_, hi = std::min(count, lo + chunk_);
    uint32_t bits;
    amax(src + lo, hi - lo, &bits);
    float amax_v;
    std::memcpy(&amax_v, &bits, 4);
    const bool finite = bits < 0x7f800000u;
    float scale = finite ? amax_v / 127.0f : std::numeric_limits<float>::quiet_NaN();
    std::memcpy(scales + c * sizeof(float), &scale, sizeof(float));
    const float inv = 127.0f / amax_v;
    // All zeros, or not finite: the bytes do not matter. So tiny that 127 / max overflows (max
    // below about 3.7e-37): every value decodes as 0, within the scale of the chunk.
    if (!(scale > 0.0f) || !(inv < std::numeric_limits<float>::infinity())) {
      std::memset(q + lo, 0, hi - lo);
      continue;
    }
    if (stochastic_) {
      quantize_any<true>(src + lo, hi - lo, inv, stream, static_cast<uint32_t>(lo), q + lo);
    } else {
      quantize_any<false>(src + lo, hi - lo, inv, stream, static_cast<uint32_t>(lo), q + lo);
    }
  }
}

void Int8Encoding::decode(const uint8_t* src, size_t count, float* dst) const {
  const size_t chunks = (count + chunk_ - 1) / chunk_;
  const auto* q = reinterpret_cast<const int8_t*>(src + chunks * sizeof(float));
  for (size_t c = 0; c < chunks; ++c) {
    float scale;
    std::memcpy(&scale, src + c * sizeof(float), sizeof(float));
    const size_t lo = c * chunk_, hi = std::min(count, lo + chunk_);
    dequantize_set(q + lo, hi - lo, scale, dst + lo);
  }
}

void Int8Encoding::decode_add(const uint8_t* src, size_t count, float* acc) const {
  const size_t chunks = (count + chunk_ - 1) / chunk_;
  const auto* q = reinterpret_cast<const int8_t*>(src + chunks * sizeof(float));
  for (size_t c = 0; c < chunks; ++c) {
    float scale;
    std::memcpy(&scale, src + c * sizeof(float), sizeof(float));
    const size_t lo = c * chunk_, hi = std::min(count, lo + chunk_);
    dequantize_add(q + lo, hi - lo, scale, acc + lo);
  }
}

}  // namespace cohort::compress
