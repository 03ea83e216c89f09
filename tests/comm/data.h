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
    case DType::F32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::F64: {
      double v;
      std::memcpy(&v, p, 8);
      return v;
    }
    case DType::F16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return f16_to_f32(v);
    }
    case DType::BF16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return bf16_to_f32(v);
    }
    case DType::I32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::I64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
    case DType::I8: {
      int8_t v;
      std::memcpy(&v, p, 1);
      return v;
    }
    case DType::U8:
    case DType::Bool:
      return *p;
  }
  return 0;
}

inline void store(DType dt, void* base, size_t i, double x) {
  auto* p = static_cast<uint8_t*>(base) + i * dtype_size(dt);
  switch (dt) {
    case DType::F32: {
      float v = static_cast<float>(x);
      std::memcpy(p, &v, 4);
      break;
    }
    case DType::F64:
      std::memcpy(p, &x, 8);
      break;
    case DType::F16: {
      uint16_t v = f32_to_f16(static_cast<float>(x));
      std::memcpy(p, &v, 2);
      break;
    }
    case DType::BF16: {
      uint16_t v = f32_to_bf16(static_cast<float>(x));
      std::memcpy(p, &v, 2);
      break;
    }
    case DType::I32: {
      int32_t v = static_cast<int32_t>(x);
      std::memcpy(p, &v, 4);
      break;
    }
    case DType::I64: {
      int64_t v = static_cast<int64_t>(x);
      std::memcpy(p, &v, 8);
      break;
    }
    // Integers of one byte wrap around, as their sums and products do.
    case DType::I8:
      *p = static_cast<uint8_t>(static_cast<int64_t>(x));
      break;
    case DType::U8:
      *p = static_cast<uint8_t>(static_cast<int64_t>(x));
      break;
    case DType::Bool:
      *p = x != 0;
      break;
  }
}

// Input element i of rank r: an integer in [-8, 8], so a sum over up to 8 ranks stays within
// the integers every dtype (even bf16) represents exactly. Unsigned bytes take [0, 16], bool 0 or
// 1, and a product's factors are +-1 and +-2 (+1 and 2 unsigned), so that a product over 8 ranks
// is exact too.
inline double input_value(int rank, size_t i, DType dt = DType::F32, ReduceOp op = ReduceOp::Sum) {
  const size_t k = i * 7 + static_cast<size_t>(rank) * 13 + i / 5;
  if (dt == DType::Bool) return static_cast<double>((k % 3) != 0);
  if (op == ReduceOp::Product) {
    const double f = static_cast<double>(1 + k % 2);
    return dt == DType::U8 || (k / 2) % 2 == 0 ? f : -f;
  }
  if (dt == DType::U8) return static_cast<double>(k % 17);
  return static_cast<double>(static_cast<int>(k % 17) - 8);
}

// Inputs for `op` (input_value).
inline std::vector<uint8_t> make_input(DType dt, int rank, size_t count, size_t offset = 0,
                                       ReduceOp op = ReduceOp::Sum) {
  std::vector<uint8_t> v(count * dtype_size(dt) + 1);  // +1: never a null pointer
  for (size_t i = 0; i < count; ++i) store(dt, v.data(), i, input_value(rank, offset + i, dt, op));
  return v;
}

inline double combine(DType dt, ReduceOp op, double acc, double x) {
  if (dt == DType::Bool) {
    const bool a = acc != 0, b = x != 0;
    switch (op) {
      case ReduceOp::Min:
      case ReduceOp::Product:
      case ReduceOp::BAnd:
        return a && b;
      case ReduceOp::BXor:
        return a != b;
      default:
        return a || b;
    }
  }
  const auto ia = static_cast<int64_t>(acc), ix = static_cast<int64_t>(x);
  switch (op) {
    case ReduceOp::Max:
      return std::max(acc, x);
    case ReduceOp::Min:
      return std::min(acc, x);
    case ReduceOp::Product:
      return acc * x;
    case ReduceOp::BAnd:
      return static_cast<double>(ia & ix);
    case ReduceOp::BOr:
      return static_cast<double>(ia | ix);
    case ReduceOp::BXor:
      return static_cast<double>(ia ^ ix);
    default:
      return acc + x;
  }
}

// The expected reduction of element i over `n` ranks (inputs made for `op`), rounded the way
// the dtype stores it.
inline double expected_value(DType dt, ReduceOp op, int n, size_t i) {
  double acc = input_value(0, i, dt, op);
  for (int r = 1; r < n; ++r) acc = combine(dt, op, acc, input_value(r, i, dt, op));
  if (op == ReduceOp::Avg) {
    if (dtype_is_float(dt)) return acc / n;
    acc = static_cast<double>(static_cast<int64_t>(acc) / n);  // integer division truncates
  }
  // What the dtype holds: one-byte integers wrap.
  uint8_t cell[8];
  store(dt, cell, 0, acc);
  return load(dt, cell, 0);
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
