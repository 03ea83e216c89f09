// Element-wise reduction kernels: the arithmetic of every reducing collective.
#pragma once

#include <cstddef>

#include "cohort/base/dtype.h"
#include "cohort/comm/types.h"

namespace cohort::comm {

// dst[i] = a[i] op b[i] for i < count. dst may be the same pointer as a or b (in place), but must
// not otherwise overlap them. Avg reduces like Sum; the collective divides once at the end
// (divide()). Integer sums wrap around (two's complement) instead of being undefined on overflow.
// f16 and bf16 are widened to f32 for the arithmetic and rounded back to nearest-even.
// Product wraps like the sum for integers. Bitwise operations need integer or bool data; bool is
// a byte of 0 or 1, for which sum and max are "or", min and product "and".
void reduce(DType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count);

// ConfigError naming `what` (the collective) unless `op` applies to `dtype`: what every reducing
// collective checks when it is issued, so that a bad pairing fails on the caller's thread.
void check_reduction(DType dtype, ReduceOp op, const char* what);

// data[i] /= divisor: the last step of Avg. Integer division truncates toward zero, so the
// average of integers is the C++ quotient of the sum (e.g. avg of {1, 2} is 1, of {-1, -2} is -1).
void divide(DType dtype, void* data, size_t count, int divisor);

}  // namespace cohort::comm
