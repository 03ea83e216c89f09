#include "cohort/comm/reduce.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/comm/half.h"
#include "data.h"

namespace cohort::comm {
namespace {

TEST(HalfConversion, F16KnownValues) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);                          // halfway to 2^16 rounds to inf
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);             // smallest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);             // tie -> even (zero)
  EXPECT_EQ(f32_to_f16(std::ldexp(1.5f, -24)), 0x0002);             // tie -> even (2)
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie below -> even
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie above -> even
  EXPECT_EQ(f32_to_f16(INFINITY), 0x7c00);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(NAN))));
  EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x8400), -std::ldexp(1.0f, -14));
}

TEST(HalfConversion, F16RoundTripsEveryValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_f16(f), h) << std::hex << h;
  }
}

TEST(HalfConversion, F16NarrowingMatchesDoubleRounding) {
  // The nearest half to x, found by brute force over all finite halves.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-70000.0f, 70000.0f);
  std::vector<float> halves;
  for (uint32_t h = 0; h < 0x7c00; ++h) halves.push_back(f16_to_f32(static_cast<uint16_t>(h)));
  for (int i = 0; i < 2000; ++i) {
    float x = dist(rng) * (i % 3 == 0 ? 1e-4f : 1.0f);
    float a = std::fabs(x);
    if (a >= 65520.0f) continue;
    auto it = std::lower_bound(halves.begin(), halves.end(), a);
    size_t hi = static_cast<size_t>(it - halves.begin());
    size_t lo = hi ? hi - 1 : 0;
    size_t best = (hi < halves.size() && (halves[hi] - a < a - halves[lo] ||
                                          (halves[hi] - a == a - halves[lo] && hi % 2 == 0)))
                      ? hi
                      : lo;
    uint16_t want = static_cast<uint16_t>(best | (x < 0 ? 0x8000 : 0));
    ASSERT_EQ(f32_to_f16(x), want) << x;
  }
}

TEST(HalfConversion, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3f808000u)), 0x3f80);  // tie -> even
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3f818000u)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3f808001u)), 0x3f81);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = bf16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_bf16(f), h);
  }
}

// One element as a double and back, in the dtype's storage (the test data's helpers, data.h).
double to_double(DType dt, const uint8_t* p) {
  return testing::load(dt, p, 0);
}
void from_double(DType dt, double x, uint8_t* p) {
  testing::store(dt, p, 0, x);
}

class ReduceKernel : public ::testing::TestWithParam<std::tuple<DType, ReduceOp>> {};

// Every element of a random input against a scalar reference, at lengths that exercise the
// vector bodies and every tail length, in place and out of place.
TEST_P(ReduceKernel, MatchesScalarReference) {
  auto [dt, op] = GetParam();
  const size_t es = dtype_size(dt);
  std::mt19937 rng(static_cast<unsigned>(dt) * 10 + static_cast<unsigned>(op));
  std::uniform_int_distribution<int> small(-100, 100);
  for (size_t n : {0, 1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 64, 1000, 4099}) {
    std::vector<uint8_t> a(n * es), b(n * es), d(n * es), want(n * es);
    for (size_t i = 0; i < n; ++i) {
      // Quarters are exact in every float type, so sums and comparisons have one right answer.
      from_double(dt, small(rng) * (dtype_is_float(dt) ? 0.25 : 1.0), a.data() + i * es);
      from_double(dt, small(rng) * (dtype_is_float(dt) ? 0.25 : 1.0), b.data() + i * es);
      double x = to_double(dt, a.data() + i * es), y = to_double(dt, b.data() + i * es);
      double r = op == ReduceOp::Max   ? std::max(x, y)
                 : op == ReduceOp::Min ? std::min(x, y)
                                       : x + y;
      from_double(dt, r, want.data() + i * es);
    }
    reduce(dt, op, d.data(), a.data(), b.data(), n);
    ASSERT_EQ(d, want) << dtype_name(dt) << " " << reduce_op_name(op) << " n=" << n;
    reduce(dt, op, a.data(), a.data(), b.data(), n);  // in place
    ASSERT_EQ(a, want) << "in place, n=" << n;
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypesAndOps, ReduceKernel,
                         ::testing::Combine(::testing::ValuesIn(kWideDTypes),
                                            ::testing::Values(ReduceOp::Sum, ReduceOp::Avg,
                                                              ReduceOp::Max, ReduceOp::Min)),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_" +
                                  std::string(reduce_op_name(std::get<1>(info.param)));
                         });

TEST(ReduceKernel, HalfSumRoundsToNearestEven) {
  // 2048 + 1 is a tie between 2048 and 2050 in f16: even mantissa wins (2048).
  uint16_t a[9], b[9], d[9];
  for (int i = 0; i < 9; ++i) {
    a[i] = f32_to_f16(2048.0f);
    b[i] = f32_to_f16(i % 2 ? 1.0f : 3.0f);  // 2049 -> 2048, 2051 -> 2052
  }
  reduce(DType::F16, ReduceOp::Sum, d, a, b, 9);
  for (int i = 0; i < 9; ++i) EXPECT_EQ(f16_to_f32(d[i]), i % 2 ? 2048.0f : 2052.0f) << i;
}

TEST(ReduceKernel, IntegerSumWrapsAround) {
  int32_t a[3] = {INT32_MAX, INT32_MIN, 5}, b[3] = {1, -1, 6}, d[3];
  reduce(DType::I32, ReduceOp::Sum, d, a, b, 3);
  EXPECT_EQ(d[0], INT32_MIN);
  EXPECT_EQ(d[1], INT32_MAX);
  EXPECT_EQ(d[2], 11);
}

TEST(ReduceKernel, DivideTruncatesIntegersAndRoundsFloats) {
  int32_t i[4] = {7, -7, 8, 1};
  divide(DType::I32, i, 4, 2);
  EXPECT_EQ(i[0], 3);
  EXPECT_EQ(i[1], -3);
  EXPECT_EQ(i[2], 4);
  EXPECT_EQ(i[3], 0);
  int64_t l[2] = {int64_t{1} << 40, -9};
  divide(DType::I64, l, 2, 4);
  EXPECT_EQ(l[0], int64_t{1} << 38);
  EXPECT_EQ(l[1], -2);
  float f[3] = {1.0f, 3.0f, -6.0f};
  divide(DType::F32, f, 3, 3);
  EXPECT_EQ(f[0], 1.0f / 3.0f);
  EXPECT_EQ(f[1], 1.0f);
  EXPECT_EQ(f[2], -2.0f);
  uint16_t h[2] = {f32_to_f16(1.0f), f32_to_bf16(6.0f)};
  divide(DType::F16, h, 1, 3);
  EXPECT_EQ(h[0], f32_to_f16(1.0f / 3.0f));
  divide(DType::BF16, h + 1, 1, 4);
  EXPECT_EQ(bf16_to_f32(h[1]), 1.5f);
}

// Every type with every reduction that applies to it (product, bitwise, the one-byte types and
// bool included) against the test data's reference (data.h), in place and out of place.
TEST(ReduceKernel, EveryTypeWithEveryReductionThatAppliesToIt) {
  const ReduceOp ops[] = {ReduceOp::Sum,  ReduceOp::Max, ReduceOp::Min, ReduceOp::Product,
                          ReduceOp::BAnd, ReduceOp::BOr, ReduceOp::BXor};
  int checked = 0;
  for (DType dt : kAllDTypes) {
    for (ReduceOp op : ops) {
      const bool bitwise = op == ReduceOp::BAnd || op == ReduceOp::BOr || op == ReduceOp::BXor;
      if (bitwise && dtype_is_float(dt)) {
        EXPECT_THROW(check_reduction(dt, op, "allreduce"), ConfigError);
        continue;
      }
      check_reduction(dt, op, "allreduce");
      for (size_t n : {1, 7, 33, 1000}) {
        auto a = testing::make_input(dt, 0, n, 0, op), b = testing::make_input(dt, 1, n, 0, op);
        std::vector<uint8_t> d(a.size());
        reduce(dt, op, d.data(), a.data(), b.data(), n);
        ASSERT_TRUE(testing::matches_reduction(dt, op, 2, d.data(), n));
        reduce(dt, op, a.data(), a.data(), b.data(), n);
        ASSERT_TRUE(testing::matches_reduction(dt, op, 2, a.data(), n)) << "in place";
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 4 * (4 * 4 + 5 * 7));  // 4 lengths x (float types x 4 ops + the rest x 7)
}

TEST(ReduceKernel, ByteIntegersWrapAndBoolStaysZeroOrOne) {
  int8_t a[3] = {127, -128, 100}, b[3] = {1, -1, 2}, d[3];
  reduce(DType::I8, ReduceOp::Sum, d, a, b, 3);
  EXPECT_EQ(d[0], -128);
  EXPECT_EQ(d[1], 127);
  reduce(DType::I8, ReduceOp::Product, d, a, b, 3);
  EXPECT_EQ(d[2], -56);  // 200 wraps to -56
  uint8_t u[2] = {250, 3}, v[2] = {10, 200}, w[2];
  reduce(DType::U8, ReduceOp::Sum, w, u, v, 2);
  EXPECT_EQ(w[0], 4);
  EXPECT_EQ(w[1], 203);
  reduce(DType::U8, ReduceOp::Max, w, u, v, 2);  // unsigned comparison
  EXPECT_EQ(w[0], 250);
  uint8_t x[4] = {0, 0, 1, 1}, y[4] = {0, 1, 0, 1}, z[4];
  reduce(DType::Bool, ReduceOp::Sum, z, x, y, 4);
  EXPECT_EQ(std::vector<uint8_t>(z, z + 4), (std::vector<uint8_t>{0, 1, 1, 1}));
  reduce(DType::Bool, ReduceOp::Product, z, x, y, 4);
  EXPECT_EQ(std::vector<uint8_t>(z, z + 4), (std::vector<uint8_t>{0, 0, 0, 1}));
  reduce(DType::Bool, ReduceOp::BXor, z, x, y, 4);
  EXPECT_EQ(std::vector<uint8_t>(z, z + 4), (std::vector<uint8_t>{0, 1, 1, 0}));
  EXPECT_THROW(check_reduction(DType::Bool, ReduceOp::Avg, "allreduce"), ConfigError);
  int8_t q[2] = {-7, 9};
  divide(DType::I8, q, 2, 2);
  EXPECT_EQ(q[0], -3);
  EXPECT_EQ(q[1], 4);
}

}  // namespace
}  // namespace cohort::comm
