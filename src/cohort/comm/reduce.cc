// The loops below are written so that GCC vectorises them at -O3. Each kernel is compiled twice,
// once with the AVX2 target attribute and once for the baseline ISA, and the AVX2 version is picked
// at run time on CPUs that have it, so the binary runs everywhere without requiring AVX2. (The
// choice is an explicit CPU check rather than target_clones: an ifunc resolver runs before the
// sanitizer runtimes are initialised and crashes the TSan build.)
// f16 uses the F16C conversion instructions when present (checked once at run time) and the
// portable scalar conversions of half.h otherwise; bf16 conversions are integer shifts that
// vectorise on their own.
#include "cohort/comm/reduce.h"

#include <chrono>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cohort/base/cpu_features.h"
#include "cohort/base/error.h"
#include "cohort/comm/flight_recorder.h"
#include "cohort/comm/half.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define COHORT_X86 1
#define COHORT_AVX2 __attribute__((target("avx2")))
#else
#define COHORT_X86 0
#define COHORT_AVX2
#endif

namespace cohort::comm {
namespace {

#define COHORT_INLINE inline __attribute__((always_inline))

struct Sum {
  template <typename T>
  static COHORT_INLINE T apply(T x, T y) {
    return x + y;
  }
};
struct Max {
  template <typename T>
  static COHORT_INLINE T apply(T x, T y) {
    return x < y ? y : x;
  }
};
struct Min {
  template <typename T>
  static COHORT_INLINE T apply(T x, T y) {
    return y < x ? y : x;
  }
};

struct Prod {
  template <typename T>
  static COHORT_INLINE T apply(T x, T y) {
    return x * y;
  }
};
struct BAnd {
  template <typename T>
  static COHORT_INLINE T apply(T x, T y) {
    return x & y;
  }
};
struct BOr {
  template <typename T>
  static COHORT_INLINE T apply(T x, T y) {
    return x | y;
  }
};
struct BXor {
  template <typename T>
  static COHORT_INLINE T apply(T x, T y) {
    return x ^ y;
  }
};

template <typename T, typename Op>
COHORT_INLINE void loop(T* dst, const T* a, const T* b, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = Op::apply(a[i], b[i]);
}

// Integer sums and products go through the unsigned type: wrap-around is defined there (and is
// the same two's-complement result as the signed one).
template <typename S, typename U, typename Op>
COHORT_INLINE void int_wrap(void* dst, const void* a, const void* b, size_t n) {
  static_assert(sizeof(S) == sizeof(U));
  loop<U, Op>(static_cast<U*>(dst), static_cast<const U*>(a), static_cast<const U*>(b), n);
}

template <typename Op>
COHORT_INLINE void bf16_loop(uint16_t* dst, const uint16_t* a, const uint16_t* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    dst[i] = f32_to_bf16(Op::apply(bf16_to_f32(a[i]), bf16_to_f32(b[i])));
  }
}

template <typename Op>
COHORT_INLINE void f16_loop_portable(uint16_t* dst, const uint16_t* a, const uint16_t* b,
                                     size_t n) {
  for (size_t i = 0; i < n; ++i) {
    dst[i] = f32_to_f16(Op::apply(f16_to_f32(a[i]), f16_to_f32(b[i])));
  }
}

bool have_avx2() {
  return cpu_has_avx2();
}

// Defines name(...) which runs `body` compiled for AVX2 or for the baseline, whichever the CPU
// supports. The loop templates are always_inline, so each copy is vectorised for its target.
#define COHORT_DISPATCH(name, params, args, body) \
  COHORT_AVX2 void name##_avx2 params {           \
    body;                                         \
  }                                               \
  void name##_base params {                       \
    body;                                         \
  }                                               \
  void name params {                              \
    if (have_avx2()) return name##_avx2 args;     \
    name##_base args;                             \
  }
#define COHORT_KERNEL_PARAMS (void* d, const void* a, const void* b, size_t n)
#define COHORT_KERNEL_ARGS (d, a, b, n)

#define COHORT_KERNEL(name, T, OP)                    \
  COHORT_DISPATCH(                                    \
      name, COHORT_KERNEL_PARAMS, COHORT_KERNEL_ARGS, \
      (loop<T, OP>(static_cast<T*>(d), static_cast<const T*>(a), static_cast<const T*>(b), n)))
COHORT_KERNEL(sum_f32, float, Sum)
COHORT_KERNEL(max_f32, float, Max)
COHORT_KERNEL(min_f32, float, Min)
COHORT_KERNEL(prod_f32, float, Prod)
COHORT_KERNEL(sum_f64, double, Sum)
COHORT_KERNEL(max_f64, double, Max)
COHORT_KERNEL(min_f64, double, Min)
COHORT_KERNEL(prod_f64, double, Prod)
// Integers: max, min and the bitwise operations on the type itself; sum and product wrap.
#define COHORT_INT_KERNELS(suffix, S, U)                                   \
  COHORT_KERNEL(max_##suffix, S, Max)                                      \
  COHORT_KERNEL(min_##suffix, S, Min)                                      \
  COHORT_KERNEL(band_##suffix, U, BAnd)                                    \
  COHORT_KERNEL(bor_##suffix, U, BOr)                                      \
  COHORT_KERNEL(bxor_##suffix, U, BXor)                                    \
  COHORT_DISPATCH(sum_##suffix, COHORT_KERNEL_PARAMS, COHORT_KERNEL_ARGS,  \
                  (int_wrap<S, U, Sum>(d, a, b, n)))                       \
  COHORT_DISPATCH(prod_##suffix, COHORT_KERNEL_PARAMS, COHORT_KERNEL_ARGS, \
                  (int_wrap<S, U, Prod>(d, a, b, n)))
COHORT_INT_KERNELS(i32, int32_t, uint32_t)
COHORT_INT_KERNELS(i64, int64_t, uint64_t)
COHORT_INT_KERNELS(i8, int8_t, uint8_t)
COHORT_INT_KERNELS(u8, uint8_t, uint8_t)
#undef COHORT_INT_KERNELS
#undef COHORT_KERNEL

#define COHORT_BF16_KERNEL(name, OP)                                                         \
  COHORT_DISPATCH(name, COHORT_KERNEL_PARAMS, COHORT_KERNEL_ARGS,                            \
                  (bf16_loop<OP>(static_cast<uint16_t*>(d), static_cast<const uint16_t*>(a), \
                                 static_cast<const uint16_t*>(b), n)))
COHORT_BF16_KERNEL(sum_bf16, Sum)
COHORT_BF16_KERNEL(max_bf16, Max)
COHORT_BF16_KERNEL(min_bf16, Min)
COHORT_BF16_KERNEL(prod_bf16, Prod)
#undef COHORT_BF16_KERNEL

#if COHORT_X86
// 8 halves at a time through F16C; the tail goes through the same instructions on a padded copy
// so that every element is rounded identically.
template <typename Op>
__attribute__((target("avx2,f16c"))) void f16_loop_f16c(uint16_t* dst, const uint16_t* a,
                                                        const uint16_t* b, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i)));
    __m256 y = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i)));
    __m256 r;
    if constexpr (std::is_same_v<Op, Sum>) {
      r = _mm256_add_ps(x, y);
    } else if constexpr (std::is_same_v<Op, Prod>) {
      r = _mm256_mul_ps(x, y);
    } else if constexpr (std::is_same_v<Op, Max>) {
      r = _mm256_max_ps(y, x);  // x < y ? y : x, like Max::apply
    } else {
      r = _mm256_min_ps(y, x);
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  if (i < n) {
    uint16_t ta[8] = {}, tb[8] = {}, td[8];
    std::memcpy(ta, a + i, (n - i) * 2);
    std::memcpy(tb, b + i, (n - i) * 2);
    f16_loop_f16c<Op>(td, ta, tb, 8);
    std::memcpy(dst + i, td, (n - i) * 2);
  }
}

bool have_f16c() {
  return cpu_has_avx2() && cpu_has_f16c();
}
#endif

template <typename Op>
void f16_kernel(void* d, const void* a, const void* b, size_t n) {
  auto* dst = static_cast<uint16_t*>(d);
  const auto* x = static_cast<const uint16_t*>(a);
  const auto* y = static_cast<const uint16_t*>(b);
#if COHORT_X86
  if (have_f16c()) return f16_loop_f16c<Op>(dst, x, y, n);
#endif
  f16_loop_portable<Op>(dst, x, y, n);
}

using Kernel = void (*)(void*, const void*, const void*, size_t);

// Each type's kernels; null where the operation does not apply to the type.
struct Kernels {
  Kernel sum, max, min, prod, band, bor, bxor;
};

Kernels kernels_of(DType dt) {
  switch (dt) {
    case DType::F32:
      return {sum_f32, max_f32, min_f32, prod_f32, nullptr, nullptr, nullptr};
    case DType::F64:
      return {sum_f64, max_f64, min_f64, prod_f64, nullptr, nullptr, nullptr};
    case DType::BF16:
      return {sum_bf16, max_bf16, min_bf16, prod_bf16, nullptr, nullptr, nullptr};
    case DType::F16:
      return {f16_kernel<Sum>, f16_kernel<Max>, f16_kernel<Min>, f16_kernel<Prod>,
              nullptr,         nullptr,         nullptr};
    case DType::I32:
      return {sum_i32, max_i32, min_i32, prod_i32, band_i32, bor_i32, bxor_i32};
    case DType::I64:
      return {sum_i64, max_i64, min_i64, prod_i64, band_i64, bor_i64, bxor_i64};
    case DType::I8:
      return {sum_i8, max_i8, min_i8, prod_i8, band_i8, bor_i8, bxor_i8};
    case DType::U8:
      return {sum_u8, max_u8, min_u8, prod_u8, band_u8, bor_u8, bxor_u8};
    // A byte of 0 or 1: "or" (sum, max), "and" (min, product) and "xor" keep it one.
    case DType::Bool:
      return {bor_u8, bor_u8, band_u8, band_u8, band_u8, bor_u8, bxor_u8};
  }
  return {};
}

Kernel kernel_of(DType dt, ReduceOp op) {
  const Kernels k = kernels_of(dt);
  switch (op) {
    case ReduceOp::Sum:
      return k.sum;
    case ReduceOp::Avg:
      return dt == DType::Bool ? nullptr : k.sum;  // divided at the end
    case ReduceOp::Max:
      return k.max;
    case ReduceOp::Min:
      return k.min;
    case ReduceOp::Product:
      return k.prod;
    case ReduceOp::BAnd:
      return k.band;
    case ReduceOp::BOr:
      return k.bor;
    case ReduceOp::BXor:
      return k.bxor;
  }
  return nullptr;
}

Kernel pick(DType dt, ReduceOp op) {
  if (Kernel k = kernel_of(dt, op)) return k;
  check_reduction(dt, op, "reduce");
  throw Error("reduce: no kernel for " + std::string(reduce_op_name(op)) + " of " +
              std::string(dtype_name(dt)));
}

template <typename T>
COHORT_INLINE void div_loop(T* p, size_t n, T d) {
  for (size_t i = 0; i < n; ++i) p[i] = p[i] / d;
}

COHORT_DISPATCH(div_f32, (void* p, size_t n, int d), (p, n, d),
                (div_loop(static_cast<float*>(p), n, static_cast<float>(d))))
COHORT_DISPATCH(div_f64, (void* p, size_t n, int d), (p, n, d),
                (div_loop(static_cast<double*>(p), n, static_cast<double>(d))))
void div_i32(void* p, size_t n, int d) {
  div_loop(static_cast<int32_t*>(p), n, int32_t{d});
}
void div_i64(void* p, size_t n, int d) {
  div_loop(static_cast<int64_t*>(p), n, int64_t{d});
}
void div_i8(void* p, size_t n, int d) {
  auto* v = static_cast<int8_t*>(p);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<int8_t>(v[i] / d);
}
void div_u8(void* p, size_t n, int d) {
  auto* v = static_cast<uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(v[i] / d);
}
COHORT_INLINE void div_bf16_loop(uint16_t* h, size_t n, float df) {
  for (size_t i = 0; i < n; ++i) h[i] = f32_to_bf16(bf16_to_f32(h[i]) / df);
}
COHORT_DISPATCH(div_bf16, (void* p, size_t n, int d), (p, n, d),
                (div_bf16_loop(static_cast<uint16_t*>(p), n, static_cast<float>(d))))
void div_f16(void* p, size_t n, int d) {
  auto* h = static_cast<uint16_t*>(p);
  const float df = static_cast<float>(d);
  for (size_t i = 0; i < n; ++i) h[i] = f32_to_f16(f16_to_f32(h[i]) / df);
}

}  // namespace

void check_reduction(DType dtype, ReduceOp op, const char* what) {
  const bool bitwise = op == ReduceOp::BAnd || op == ReduceOp::BOr || op == ReduceOp::BXor;
  if (bitwise && dtype_is_float(dtype)) {
    throw ConfigError(std::string(what) + ": " + std::string(reduce_op_name(op)) +
                      " needs integer or bool data, got " + std::string(dtype_name(dtype)));
  }
  if (op == ReduceOp::Avg && dtype == DType::Bool) {
    throw ConfigError(std::string(what) + ": avg of bool data is not defined");
  }
  if (!dtype_is_known(static_cast<uint8_t>(dtype)) ||
      static_cast<uint8_t>(op) > static_cast<uint8_t>(ReduceOp::BXor)) {
    throw ConfigError(std::string(what) + ": unknown element type or reduction");
  }
}

void reduce(DType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count) {
  if (count == 0) return;
  OpTiming* timing = t_op_timing;
  if (!timing || !timing->time_reductions) return pick(dtype, op)(dst, a, b, count);
  const auto t0 = std::chrono::steady_clock::now();
  pick(dtype, op)(dst, a, b, count);
  timing->reduce_ns += (std::chrono::steady_clock::now() - t0).count();
}

void divide(DType dtype, void* data, size_t count, int divisor) {
  if (count == 0 || divisor == 1) return;
  if (divisor == 0) throw Error("divide: divisor is zero");
  switch (dtype) {
    case DType::F32:
      return div_f32(data, count, divisor);
    case DType::F64:
      return div_f64(data, count, divisor);
    case DType::F16:
      return div_f16(data, count, divisor);
    case DType::BF16:
      return div_bf16(data, count, divisor);
    case DType::I32:
      return div_i32(data, count, divisor);
    case DType::I64:
      return div_i64(data, count, divisor);
    case DType::I8:
      return div_i8(data, count, divisor);
    case DType::U8:
      return div_u8(data, count, divisor);
    case DType::Bool:
      throw ConfigError("divide: avg of bool data is not defined");
  }
}

}  // namespace cohort::comm
