// allreduce_encoded and allgatherv on several world sizes, with encodings defined here (the real
// formats live in compress/ and are tested there).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "cohort/comm/communicator.h"
#include "world.h"

namespace cohort::comm {
namespace {

using testing::World;

// Fixed point: round(x * scale) as int16 in chunks of `chunk` values, each chunk prefixed with its
// first value's index so that a misplaced segment is caught. Lossless for multiples of 1/scale.
class FixedPoint final : public Encoding {
 public:
  FixedPoint(float scale, size_t chunk, uint32_t tag = 77)
      : scale_(scale), chunk_(chunk), tag_(tag) {}
  uint32_t wire_tag() const override { return tag_; }
  std::string_view name() const override { return "fixed-point"; }
  size_t granule() const override { return chunk_; }
  size_t encoded_bytes(size_t n) const override { return n * 2 + 4; }
  void encode(const float* src, size_t n, uint8_t* dst) override {
    ++calls;
    const uint32_t len = static_cast<uint32_t>(n);
    std::memcpy(dst, &len, 4);
    for (size_t i = 0; i < n; ++i) {
      auto q = static_cast<int16_t>(std::lround(src[i] * scale_));
      std::memcpy(dst + 4 + 2 * i, &q, 2);
    }
  }
  void decode(const uint8_t* src, size_t n, float* dst) const override {
    check(src, n);
    for (size_t i = 0; i < n; ++i) dst[i] = value(src, i);
  }
  void decode_add(const uint8_t* src, size_t n, float* acc) const override {
    check(src, n);
    for (size_t i = 0; i < n; ++i) acc[i] += value(src, i);
  }
  size_t calls = 0;

 private:
  static void check(const uint8_t* src, size_t n) {
    uint32_t len;
    std::memcpy(&len, src, 4);
    if (len != n)
      throw Error("decoded a run of " + std::to_string(n) + " as " + std::to_string(len));
  }
  float value(const uint8_t* src, size_t i) const {
    int16_t q;
    std::memcpy(&q, src + 4 + 2 * i, 2);
    return static_cast<float>(q) / scale_;
  }
  float scale_;
  size_t chunk_;
  uint32_t tag_;
};

// Input value i of rank r: a multiple of 1/8, small enough that sums of 5 ranks stay in int16.
float input(int r, size_t i) {
  return static_cast<float>((static_cast<int>(i * 7 + r * 13) % 41) - 20) / 8.0f;
}

class EncodedCollectives : public ::testing::TestWithParam<int> {};

TEST_P(EncodedCollectives, AllreduceEncodedSumsInF32AndEveryRankGetsTheSameResult) {
  const int n = GetParam();
  World world(n);  // chunk_bytes 256: 64-value segments, so blocks span several segments
  world.run([&](int r, Communicator& comm) {
    for (size_t m : {size_t{0}, size_t{1}, size_t{7}, size_t{300}, size_t{1001}}) {
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
        FixedPoint enc(8.0f * static_cast<float>(n), 16);
        std::vector<float> buf(m), residual(m, 123.0f);
        for (size_t i = 0; i < m; ++i) buf[i] = input(r, i);
        comm.allreduce_encoded(Buffer{DType::F32, buf.data(), m}, enc,
                               {.op = op, .residual = Buffer{DType::F32, residual.data(), m}})
            ->wait();
        for (size_t i = 0; i < m; ++i) {
          double sum = 0;
          for (int q = 0; q < n; ++q) sum += input(q, i);
          const double want = n == 1 ? input(r, i) : (op == ReduceOp::Avg ? sum / n : sum);
          ASSERT_NEAR(buf[i], want, 1e-5) << "rank " << r << " m=" << m << " element " << i;
          ASSERT_EQ(residual[i], 0.0f) << "a lossless encoding drops nothing";
        }
      }
    }
  });
}

TEST_P(EncodedCollectives, ResidualHoldsExactlyWhatTheEncodingsDropped) {
  const int n = GetParam();
  const size_t m = 517;
  World world(n);
  std::vector<std::vector<float>> results(n), residuals(n), inputs(n);
  world.run([&](int r, Communicator& comm) {
    FixedPoint coarse(2.0f, 8);  // rounds to halves: lossy
    auto& x = inputs[r];
    x.resize(m);
    for (size_t i = 0; i < m; ++i) x[i] = std::sin(static_cast<float>(i * (r + 1))) * 3.0f;
    results[r] = x;
    residuals[r].assign(m, 0.0f);
    comm.allreduce_encoded(
            Buffer{DType::F32, results[r].data(), m}, coarse,
            {.op = ReduceOp::Avg, .residual = Buffer{DType::F32, residuals[r].data(), m}})
        ->wait();
  });
  for (size_t i = 0; i < m; ++i) {
    double in = 0, res = 0;
    for (int r = 0; r < n; ++r) {
      in += inputs[r][i];
      res += residuals[r][i];
      ASSERT_EQ(results[r][i], results[0][i]) << "ranks disagree at " << i;
      if (n > 1) {
        ASSERT_EQ(std::fmod(results[r][i] * 2.0f, 1.0f), 0.0f) << "not encoded";
      }
    }
    ASSERT_NEAR(n * results[0][i] + res, in, 1e-4) << "element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, EncodedCollectives, ::testing::Values(1, 2, 3, 4, 5),
                         [](const auto& info) { return "n" + std::to_string(info.param); });

TEST(EncodedCollectives, RanksWithDifferentFormatsFailWithProtocolError) {
  World world(2, [](CommConfig& c) { c.timeout = std::chrono::seconds(20); });
  std::vector<std::string> errors(2);
  world.run([&](int r, Communicator& comm) {
    FixedPoint enc(8.0f, 16, r == 0 ? 77 : 78);
    std::vector<float> buf(100, 1.0f);
    try {
      comm.allreduce_encoded(Buffer{DType::F32, buf.data(), buf.size()}, enc)->wait();
    } catch (const ProtocolError& e) {
      errors[r] = e.what();
    } catch (const std::exception& e) {
      errors[r] = std::string("other: ") + e.what();
    }
  });
  bool named = false;
  for (auto& e : errors) named |= e.find("wire format 7") != std::string::npos;
  EXPECT_TRUE(named) << errors[0] << " | " << errors[1];
}

TEST(EncodedCollectives, RejectsWhatItCannotReduce) {
  World world(1);
  FixedPoint enc(8.0f, 16);
  std::vector<double> d(4);
  std::vector<float> f(4), short_residual(3);
  EXPECT_THROW(world[0].allreduce_encoded(Buffer{DType::F64, d.data(), 4}, enc), ConfigError);
  EXPECT_THROW(
      world[0].allreduce_encoded(Buffer{DType::F32, f.data(), 4}, enc, {.op = ReduceOp::Max}),
      ConfigError);
  EXPECT_THROW(
      world[0].allreduce_encoded(Buffer{DType::F32, f.data(), 4}, enc,
                                 {.residual = Buffer{DType::F32, short_residual.data(), 3}}),
      ConfigError);
}

class Allgatherv : public ::testing::TestWithParam<int> {};

TEST_P(Allgatherv, GathersBlocksOfEveryRanksOwnSize) {
  const int n = GetParam();
  World world(n);
  world.run([&](int r, Communicator& comm) {
    for (size_t scale : {size_t{0}, size_t{1}, size_t{50}}) {
      // Rank r sends (r * scale + r % 2) values: some ranks send nothing.
      const size_t mine = static_cast<size_t>(r) * scale + static_cast<size_t>(r % 2);
      std::vector<int32_t> in(mine);
      for (size_t i = 0; i < mine; ++i) in[i] = r * 100000 + static_cast<int32_t>(i);
      GatheredBlocks out;
      comm.allgatherv(Buffer{DType::I32, in.data(), mine}, &out)->wait();
      ASSERT_EQ(out.dtype, DType::I32);
      ASSERT_EQ(out.counts.size(), static_cast<size_t>(n));
      for (int b = 0; b < n; ++b) {
        const size_t len = static_cast<size_t>(b) * scale + static_cast<size_t>(b % 2);
        ASSERT_EQ(out.counts[b], len) << "rank " << r << " block " << b;
        const auto* p = reinterpret_cast<const int32_t*>(out.block(b));
        for (size_t i = 0; i < len; ++i) ASSERT_EQ(p[i], b * 100000 + static_cast<int32_t>(i));
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, Allgatherv, ::testing::Values(1, 2, 3, 4, 5),
                         [](const auto& info) { return "n" + std::to_string(info.param); });

}  // namespace
}  // namespace cohort::comm
