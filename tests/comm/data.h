// Test data: small integer-valued inputs whose sums are exact in every dtype, and a float64
// reference to check results against.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cohort/base/dtype.h"
#include "cohort/comm/half.h"
#include "cohort/comm/types.h"

namespace cohort::comm::testing {

inline double load(DType dt, const void* base, size_t i) {
  const auto* p = static_cast<const uint8_t*>(base) + i * dtype_size(dt);
  switch (dt) {
    case DType::F32: { float v; std::memcpy(&v, p, 4); return v; }
    case DType::F64: { double v; std::memcpy(&v, p, 8); return v; }
    case DType::F16: { uint16_t v; std::memcpy(&v, p, 2); return f16_to_f32(v); }
    case DType::BF16: { uint16_t v; std::memcpy(&v, p, 2); return bf16_to_f32(v); }
    case DType::I32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case DType::I64: { int64_t v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
  }
  return 0;
}

inline void store(DType dt, void* base, size_t i, double x) {
  auto* p = static_cast<uint8_t*>(base) + i * dtype_size(dt);
  switch (dt) {
    case DType::F32: { float v = static_cast<float>(x); std::memcpy(p, &v, 4); break; }
    case DType::F64: std::memcpy(p, &x, 8); break;
    case DType::F16: { uint16_t v = f32_to_f16(static_cast<float>(x)); std::memcpy(p, &v, 2); break; }
    case DType::BF16: { uint16_t v = f32_to_bf16(static_cast<float>(x)); std::memcpy(p, &v, 2); break; }
    case DType::I32: { int32_t v = static_cast<int32_t>(x); std::memcpy(p, &v, 4); break; }
    case DType::I64: { int64_t v = static_cast<int64_t>(x); std::memcpy(p, &v, 8); break; }
  }
}

// Input element i of rank r: an integer in [-8, 8], so a sum over up to 8 ranks stays within
// the integers every dtype (even bf16) represents exactly.
inline double input_value(int rank, size_t i) {
  return static_cast<double>(static_cast<int>((i * 7 + static_cast<size_t>(rank) * 13 + i / 5) % 17) - 8);
}

inline std::vector<uint8_t> make_input(DType dt, int rank, size_t count, size_t offset = 0) {
  std::vector<uint8_t> v(count * dtype_size(dt) + 1);  // +1: never a null pointer
  for (size_t i = 0; i < count; ++i) store(dt, v.data(), i, input_value(rank, offset + i));
  return v;
}

// The expected reduction of element i over `n` ranks, rounded the way the dtype stores it.
inline double expected_value(DType dt, ReduceOp op, int n, size_t i) {
  double acc = input_value(0, i);
  for (int r = 1; r < n; ++r) {
    double x = input_value(r, i);
    acc = op == ReduceOp::Max ? std::max(acc, x) : op == ReduceOp::Min ? std::min(acc, x) : acc + x;
  }
  if (op == ReduceOp::Avg) {
    if (dtype_is_float(dt)) return acc / n;
    return static_cast<double>(static_cast<int64_t>(acc) / n);  // integer division truncates
  }
  return acc;
}

// Sums, maxima and minima are exact; a float average is within one rounding of the dtype.
inline double tolerance(DType dt, ReduceOp op, double want) {
  if (op != ReduceOp::Avg || !dtype_is_float(dt)) return 0;
  double eps = dt == DType::F64 ? 1e-15 : dt == DType::F32 ? 1e-7 : dt == DType::F16 ? 1e-3 : 8e-3;
  return eps * std::max(1.0, std::fabs(want));
}

// Checks `count` elements of `got` against the reduction of elements [offset, offset + count).
inline ::testing::AssertionResult matches_reduction(DType dt, ReduceOp op, int n, const void* got,
                                                    size_t count, size_t offset = 0) {
  for (size_t i = 0; i < count; ++i) {
    double want = expected_value(dt, op, n, offset + i);
    double g = load(dt, got, i);
    if (!(std::fabs(g - want) <= tolerance(dt, op, want))) {
      return ::testing::AssertionFailure()
             << "element " << offset + i << " is " << g << ", expected " << want << " ("
             << dtype_name(dt) << " " << reduce_op_name(op) << ", " << n << " ranks)";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace cohort::comm::testing
