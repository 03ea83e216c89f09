// Each codec's round trip within its documented bound, its exchange over real communicators
// (ranks as threads over loopback), and error feedback: the sum of what the ranks applied over
// many steps converges to the sum of their gradients.
#include "cohort/compress/codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <thread>

#include "../comm/world.h"
#include "cohort/compress/formats.h"

namespace cohort::compress {
namespace {

using comm::testing::World;

std::vector<float> random_values(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(gen);
  return v;
}

CompressionOptions options(Method m) {
  CompressionOptions o;
  o.method = m;
  o.min_bytes = 0;
  o.powersgd_warmup_steps = 0;
  o.topk_ratio = 0.05;
  return o;
}

TEST(Methods, ParseNamesAndRejectOthers) {
  for (Method m :
       {Method::None, Method::Fp16, Method::Bf16, Method::Int8, Method::TopK, Method::PowerSgd}) {
    EXPECT_EQ(parse_method(method_name(m)), m);
  }
  try {
    parse_method("zip");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("fp16, bf16, int8, topk, powersgd"), std::string::npos);
  }
}

TEST(RoundTrip, Fp16WithinHalfAnUlpAndSaturates) {
  auto x = random_values(5000, 1);
  for (size_t i = 0; i < x.size(); ++i) x[i] *= std::pow(10.0f, static_cast<float>(i % 9) - 4.0f);
  // Infinities stay infinities, within a vector's eight values and in the tail.
  const float inf = std::numeric_limits<float>::infinity();
  x[8] = inf;
  x[9] = -inf;
  x.push_back(inf);
  x.push_back(1e6f);
  x.push_back(-7e4f);
  x.push_back(std::nanf(""));
  auto codec = make_codec(options(Method::Fp16), x.size());
  std::vector<float> out(x.size());
  codec->round_trip(x.data(), out.data());
  EXPECT_EQ(out[8], inf);
  EXPECT_EQ(out[9], -inf);
  EXPECT_EQ(out[out.size() - 4], inf);
  for (size_t i = 0; i + 4 < x.size(); ++i) {
    if (i == 8 || i == 9) continue;
    const float a = std::fabs(x[i]);
    const float bound = a >= 0x1p-14f ? a * 0x1p-11f : 0x1p-25f;
    ASSERT_LE(std::fabs(out[i] - x[i]), bound) << x[i];
  }
  EXPECT_EQ(out[out.size() - 3], 65504.0f);
  EXPECT_EQ(out[out.size() - 2], -65504.0f);
  EXPECT_TRUE(std::isnan(out.back()));
}

TEST(RoundTrip, Bf16WithinHalfAnUlp) {
  auto x = random_values(5000, 2, 1e3f);
  auto codec = make_codec(options(Method::Bf16), x.size());
  std::vector<float> out(x.size());
  codec->round_trip(x.data(), out.data());
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_LE(std::fabs(out[i] - x[i]), std::fabs(x[i]) * 0x1p-8f) << x[i];
  }
}

// The bound is per chunk: |error| < max|x over the chunk| / 127 (stochastic), half that (nearest).
void check_int8(bool stochastic) {
  CompressionOptions o = options(Method::Int8);
  o.int8_chunk = 64;
  o.int8_stochastic_rounding = stochastic;
  auto x = random_values(1000, 3);
  for (size_t i = 0; i < x.size(); ++i) x[i] *= (i / 64) % 2 ? 100.0f : 0.01f;  // scales differ
  std::fill(x.begin() + 128, x.begin() + 192, 0.0f);                            // an all-zero chunk
  auto codec = make_codec(o, x.size());
  std::vector<float> out(x.size());
  codec->round_trip(x.data(), out.data());
  for (size_t c = 0; c * 64 < x.size(); ++c) {
    float amax = 0;
    for (size_t i = c * 64; i < std::min(x.size(), c * 64 + 64); ++i)
      amax = std::max(amax, std::fabs(x[i]));
    const float step = amax / 127.0f;
    for (size_t i = c * 64; i < std::min(x.size(), c * 64 + 64); ++i) {
      if (stochastic) {
        const float err = std::fabs(out[i] - x[i]);
        ASSERT_TRUE(err < step * 1.0001f || err == 0.0f) << "chunk " << c;
      } else {
        ASSERT_LE(std::fabs(out[i] - x[i]), step * 0.5001f) << "chunk " << c;
      }
    }
  }
}

TEST(RoundTrip, Int8StochasticWithinOneStep) {
  check_int8(true);
}
TEST(RoundTrip, Int8NearestWithinHalfAStep) {
  check_int8(false);
}

// A chunk so small that 127 / max|x| overflows decodes as zeros (within its scale), never NaN.
TEST(RoundTrip, Int8ChunksOfTinyValuesDecodeWithinTheirScale) {
  for (bool stochastic : {false, true}) {
    Int8Encoding enc(256, stochastic, 7);
    std::vector<float> x(300, 0.0f);
    for (size_t i = 0; i < x.size(); i += 3) x[i] = (i % 2 ? -1.0f : 1.0f) * 1e-38f;
    std::vector<uint8_t> bytes(enc.encoded_bytes(x.size()));
    enc.encode(x.data(), x.size(), bytes.data());
    std::vector<float> out(x.size(), -1.0f);
    enc.decode(bytes.data(), x.size(), out.data());
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_TRUE(std::isfinite(out[i])) << i;
      ASSERT_LE(std::fabs(out[i] - x[i]), 1e-37f) << i;
    }
  }
}

TEST(RoundTrip, Int8StochasticRoundingIsUnbiasedAndSeeded) {
  CompressionOptions o = options(Method::Int8);
  o.int8_chunk = 32;
  auto x = random_values(32, 4);
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  auto codec = make_codec(o, x.size());
  std::vector<double> mean(x.size(), 0.0);
  std::vector<float> out(x.size());
  const int trials = 4000;
  for (int t = 0; t < trials; ++t) {
    codec->round_trip(x.data(), out.data());
    for (size_t i = 0; i < x.size(); ++i) mean[i] += out[i] / trials;
  }
  // The mean of `trials` draws with at most one step between them: 6 standard deviations.
  const double tol = 6 * (amax / 127.0) / (2 * std::sqrt(double(trials)));
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(mean[i], x[i], tol) << i;
  // Same seed, same calls: same values.
  auto a = make_codec(o, x.size()), b = make_codec(o, x.size());
  std::vector<float> oa(x.size()), ob(x.size());
  a->round_trip(x.data(), oa.data());
  b->round_trip(x.data(), ob.data());
  EXPECT_EQ(oa, ob);
}

TEST(RoundTrip, TopKKeepsTheLargestValuesExactly) {
  CompressionOptions o = options(Method::TopK);
  o.topk_ratio = 0.01;
  auto x = random_values(10000, 5);
  auto codec = make_codec(o, x.size());
  std::vector<float> out(x.size());
  codec->round_trip(x.data(), out.data());
  std::vector<float> mags;
  for (float v : x) mags.push_back(std::fabs(v));
  std::sort(mags.rbegin(), mags.rend());
  const float kth = mags[99];
  size_t kept = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (out[i] != 0.0f) {
      ++kept;
      ASSERT_EQ(out[i], x[i]);
      ASSERT_GE(std::fabs(x[i]), kth);
    } else {
      ASSERT_LE(std::fabs(x[i]), kth);
    }
  }
  EXPECT_EQ(kept, 100u);
}

TEST(RoundTrip, PowerSgdIsExactForLowRankMatricesAndPassesVectorsThrough) {
  CompressionOptions o = options(Method::PowerSgd);
  o.powersgd_rank = 4;
  // A 60 x 80 matrix of rank 3, then a bias of 60 values.
  const size_t rows = 60, cols = 80;
  auto u = random_values(rows * 3, 6), v = random_values(cols * 3, 7),
       bias = random_values(rows, 8);
  std::vector<float> x(rows * cols + rows, 0.0f);
  for (size_t i = 0; i < rows; ++i) {
    for (size_t j = 0; j < cols; ++j) {
      for (size_t k = 0; k < 3; ++k) x[i * cols + j] += u[i * 3 + k] * v[j * 3 + k];
    }
  }
  std::copy(bias.begin(), bias.end(), x.begin() + rows * cols);
  auto codec = make_codec(o, x.size(), {{0, rows, cols}, {rows * cols, 1, rows}});
  std::vector<float> out(x.size());
  codec->round_trip(x.data(), out.data());
  double err = 0, norm = 0;
  for (size_t i = 0; i < rows * cols; ++i) {
    err += (out[i] - x[i]) * (out[i] - x[i]);
    norm += x[i] * x[i];
  }
  EXPECT_LT(std::sqrt(err / norm), 1e-4);
  for (size_t i = rows * cols; i < x.size(); ++i) ASSERT_EQ(out[i], x[i]);
}

TEST(Codecs, SmallBucketsGoUncompressed) {
  CompressionOptions o;
  o.method = Method::TopK;
  o.min_bytes = 4096;
  EXPECT_EQ(make_codec(o, 1023)->method(), Method::None);
  EXPECT_EQ(make_codec(o, 1024)->method(), Method::TopK);
}

// Input of rank r at step t: a steady signal plus noise, different per rank.
std::vector<float> gradient(int r, int t, size_t n) {
  auto g = random_values(n, static_cast<uint64_t>(1000 * t + r + 1), 0.5f);
  for (size_t i = 0; i < n; ++i) g[i] += std::cos(static_cast<float>(i)) * (1.0f + 0.1f * r);
  return g;
}

struct Exchange {
  std::vector<float> sum_applied;  // sum over steps of the result (rank 0's; all ranks agree)
  std::vector<float> sum_average;  // sum over steps of the true average gradient
  std::vector<std::vector<float>> residuals;
};

// `steps` exchanges of gradient() on n ranks with codec options o; checks that every rank gets
// the same bits at every step.
Exchange run_steps(int n, const CompressionOptions& o, size_t count, int steps,
                   std::vector<TensorShape> shapes = {}) {
  World world(n);
  Exchange ex;
  ex.sum_applied.assign(count, 0.0f);
  ex.sum_average.assign(count, 0.0f);
  ex.residuals.resize(n);
  std::vector<std::vector<float>> results(n);
  std::mutex mu;
  world.run([&](int r, comm::Communicator& comm) {
    auto codec = make_codec(o, count, shapes, r, 0);
    EXPECT_EQ(codec->method(), o.method);
    for (int t = 0; t < steps; ++t) {
      auto g = gradient(r, t, count);
      codec->start(g.data(), comm, {});
      codec->finish();
      results[r] = g;
      comm.barrier()->wait();
      if (r == 0) {
        for (int q = 1; q < n; ++q) {
          if (results[q] != results[0]) ADD_FAILURE() << "rank " << q << " differs at step " << t;
        }
        for (int q = 0; q < n; ++q) {
          const auto gq = gradient(q, t, count);
          for (size_t i = 0; i < count; ++i) ex.sum_average[i] += gq[i] / n;
        }
        for (size_t i = 0; i < count; ++i) ex.sum_applied[i] += results[0][i];
      }
      comm.barrier()->wait();
    }
    std::lock_guard lk(mu);
    ex.residuals[r] = codec->residual();
  });
  return ex;
}

double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err += (a[i] - b[i]) * double(a[i] - b[i]);
    norm += b[i] * double(b[i]);
  }
  return std::sqrt(err / norm);
}

// Top-k's warm-up: the first warmup_steps exchanges are exact averages and keep no residual; then
// each rank sends its k largest values, so the result has at most n * k nonzeros.
TEST(Codecs, TopKWarmsUpWithPlainAllreduce) {
  const int n = 2, warmup = 3;
  const size_t count = 3000;
  CompressionOptions o = options(Method::TopK);
  o.topk_ratio = 0.01;
  o.topk_warmup_steps = warmup;
  World world(n);
  world.run([&](int r, comm::Communicator& comm) {
    auto codec = make_codec(o, count, {}, r, 0);
    for (int t = 0; t <= warmup; ++t) {
      auto g = gradient(r, t, count);
      codec->start(g.data(), comm, {});
      codec->finish();
      const auto g0 = gradient(0, t, count), g1 = gradient(1, t, count);
      size_t nonzero = 0, exact = 0;
      for (size_t i = 0; i < count; ++i) {
        nonzero += g[i] != 0.0f;
        exact += std::fabs(g[i] - (g0[i] + g1[i]) / 2) <= 1e-6f * (1 + std::fabs(g[i]));
      }
      const bool residual_empty = std::all_of(codec->residual().begin(), codec->residual().end(),
                                              [](float v) { return v == 0.0f; });
      if (t < warmup) {
        EXPECT_EQ(exact, count) << "rank " << r << " step " << t;
        EXPECT_TRUE(residual_empty) << "rank " << r << " step " << t;
      } else {
        EXPECT_LE(nonzero, n * static_cast<size_t>(std::ceil(o.topk_ratio * count)))
            << "rank " << r;
        EXPECT_FALSE(residual_empty) << "rank " << r;
      }
    }
  });
}

// A job resumed at step s (checkpoint, membership change) builds new codecs and tells them the
// step: those past their warm-up compress from their first exchange, those still in it finish
// only what is left of it.
TEST(Codecs, WarmUpCountsTrainingStepsNotExchangesOfThisCodec) {
  const int n = 2;
  const size_t count = 3000;
  for (Method m : {Method::TopK, Method::PowerSgd}) {
    CompressionOptions o = options(m);
    o.topk_warmup_steps = 5;
    o.powersgd_warmup_steps = 5;
    for (int64_t resumed_at : {int64_t{3}, int64_t{5}, int64_t{40}}) {
      World world(n);
      world.run([&](int r, comm::Communicator& comm) {
        auto codec = make_codec(o, count, {{0, 50, 60}}, r, 0);
        codec->set_step(resumed_at);
        for (int64_t step = resumed_at; step < 7; ++step) {
          auto g = gradient(r, static_cast<int>(step), count);
          codec->start(g.data(), comm, {});
          codec->finish();
          const bool residual_empty =
              std::all_of(codec->residual().begin(), codec->residual().end(),
                          [](float v) { return v == 0.0f; });
          EXPECT_EQ(residual_empty, step < 5) << method_name(m) << " resumed at " << resumed_at
                                              << ", rank " << r << ", step " << step;
        }
        if (resumed_at >= 5) {
          auto g = gradient(r, 0, count);
          codec->start(g.data(), comm, {});
          codec->finish();
          EXPECT_FALSE(std::all_of(codec->residual().begin(), codec->residual().end(),
                                   [](float v) { return v == 0.0f; }))
              << method_name(m) << " resumed at " << resumed_at << ", rank " << r;
        }
        EXPECT_EQ(codec->step(), std::max<int64_t>(resumed_at, 7) + (resumed_at >= 5 ? 1 : 0));
      });
    }
  }
}

// A checkpoint at step k holds each rank's codec state; codecs built afresh that load it exchange
// bit for bit what the codecs that went on without a stop exchange (residuals, PowerSGD's Q,
// int8's rounding stream), and without it they would not.
TEST(Codecs, ACodecRestoredFromItsStateContinuesBitForBit) {
  const int n = 2, before = 6, after = 4;
  const size_t count = 3000;
  for (Method m : {Method::Fp16, Method::Int8, Method::TopK, Method::PowerSgd}) {
    CompressionOptions o = options(m);
    o.powersgd_warmup_steps = 2;
    // Results per rank of steps before..before+after: straight, restored, fresh (no state).
    std::vector<std::vector<std::vector<float>>> straight(n), restored(n), fresh(n);
    World world(n);
    world.run([&](int r, comm::Communicator& comm) {
      const std::vector<TensorShape> shapes = {{0, 50, 60}};
      auto a = make_codec(o, count, shapes, r, 0);
      for (int t = 0; t < before; ++t) {
        auto g = gradient(r, t, count);
        a->start(g.data(), comm, {});
        a->finish();
      }
      const std::string state = a->save_state();
      auto b = make_codec(o, count, shapes, r, 0);
      b->set_step(before);
      b->load_state(state);
      auto c = make_codec(o, count, shapes, r, 0);
      c->set_step(before);
      for (int t = before; t < before + after; ++t) {
        for (auto [codec, out] :
             {std::pair{a.get(), &straight[r]}, std::pair{b.get(), &restored[r]},
              std::pair{c.get(), &fresh[r]}}) {
          auto g = gradient(r, t, count);
          codec->start(g.data(), comm, {});
          codec->finish();
          out->push_back(g);
        }
      }
      EXPECT_EQ(a->residual(), b->residual()) << method_name(m) << " rank " << r;
    });
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(restored[r], straight[r]) << method_name(m) << " rank " << r;
      EXPECT_NE(fresh[r], straight[r]) << method_name(m) << ": a codec without the state";
    }
  }
}

TEST(Codecs, AStateThatDoesNotFitIsRefusedByName) {
  auto topk = make_codec(options(Method::TopK), 3000);
  auto powersgd = make_codec(options(Method::PowerSgd), 3000);
  const std::string state = topk->save_state();
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message([&] { powersgd->load_state(state); }),
            "codec state: of topk, this bucket's is powersgd");
  EXPECT_EQ(message([&] { make_codec(options(Method::TopK), 4000)->load_state(state); }),
            "codec state: of a bucket of 3000 values, this one has 4000");
  EXPECT_EQ(message([&] { topk->load_state(state.substr(0, state.size() - 1)); }),
            "codec state: truncated (" + std::to_string(state.size() - 1) + " bytes)");
  EXPECT_EQ(message([&] { topk->load_state(state + "x"); }), "codec state: 1 bytes too many");
  EXPECT_EQ(message([&] { topk->load_state("gar"); }), "codec state: truncated (3 bytes)");
  EXPECT_EQ(message([&] { topk->load_state(std::string(64, 'x')); }),
            "codec state: not a codec state");
  // Error feedback may change across a resume: no residual in, none kept out.
  CompressionOptions without = options(Method::TopK);
  without.error_feedback = false;
  auto plain = make_codec(without, 3000);
  EXPECT_EQ(message([&] { plain->load_state(state); }), "no error");
  EXPECT_EQ(message([&] { topk->load_state(plain->save_state()); }), "no error");
}

// PowerSGD's two allreduces, and the work between and after them, go on while the caller
// computes: start() issues both, chained, and the communication thread runs them without waiting
// for finish(). Small collectives normally wait for their caller (CommConfig's hand-off delay,
// here longer than the test), so this also checks that the codec asks for them to start at once.
TEST(Exchange, PowerSgdAveragesBothFactorsBeforeFinishIsCalled) {
  comm::testing::World world(2, [](comm::CommConfig& c) {
    c.hand_off_delay = std::chrono::seconds(60);
    c.hand_off_delay_max = std::chrono::seconds(60);
  });
  std::vector<std::vector<float>> results(2);
  world.run([&](int r, comm::Communicator& comm) {
    CompressionOptions o = options(Method::PowerSgd);
    o.min_bytes = 0;
    auto codec = make_codec(o, 3000, {{0, 50, 60}}, r, 0);
    auto g = gradient(r, 0, 3000);
    const uint64_t before = comm.flight_recorder().newest();
    codec->start(g.data(), comm, {});
    EXPECT_EQ(comm.flight_recorder().newest(), before + 2) << "P's and Q's allreduces";
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (comm.flight_recorder().last_done() < before + 2 &&
           std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(comm.flight_recorder().last_done(), before + 2);
    codec->finish();
    results[static_cast<size_t>(r)] = g;
  });
  EXPECT_EQ(results[0], results[1]);
}

// A gradient that was not finite at one step (an overflow on one rank) is seen in that step's
// result, and leaves nothing in the codec's state: the next finite steps give finite results,
// the same on every rank, for every codec with error feedback.
TEST(Exchange, AGradientThatWasNotFiniteDoesNotPoisonTheStepsAfterIt) {
  const float inf = std::numeric_limits<float>::infinity();
  for (Method m : {Method::Fp16, Method::Bf16, Method::Int8, Method::TopK, Method::PowerSgd}) {
    SCOPED_TRACE(method_name(m));
    std::vector<std::vector<float>> results(2);
    World world(2);
    world.run([&](int r, comm::Communicator& comm) {
      auto codec = make_codec(options(m), 3000, {{0, 50, 60}}, r, 0);
      for (int t = 0; t < 4; ++t) {
        auto g = gradient(r, t, 3000);
        if (t == 1 && r == 0) {
          g[5] = inf;
          g[700] = std::nanf("");
        }
        codec->start(g.data(), comm, {});
        codec->finish();
        if (t == 1) {
          EXPECT_FALSE(std::all_of(g.begin(), g.end(), [](float v) { return std::isfinite(v); }))
              << "the overflow was hidden";
        }
        if (t == 3) {
          EXPECT_TRUE(std::all_of(g.begin(), g.end(), [](float v) { return std::isfinite(v); }));
          results[static_cast<size_t>(r)] = g;
        }
      }
    });
    EXPECT_EQ(results[0], results[1]);
  }
}

class ExchangeTest : public ::testing::TestWithParam<std::tuple<Method, int>> {};

TEST_P(ExchangeTest, OneStepIsCloseToTheAverageAndTheSameOnEveryRank) {
  auto [m, n] = GetParam();
  const size_t count = 3000;
  auto ex = run_steps(n, options(m), count, 1, {{0, 50, 60}});
  const double err = relative_error(ex.sum_applied, ex.sum_average);
  // One step's bound in relative (Frobenius) terms: fp16 2^-11, bf16 2^-8, int8 one step of 127
  // per value; top-k and PowerSGD drop most of the signal on one step and rely on error feedback.
  const double bound = m == Method::Fp16   ? 1e-3
                       : m == Method::Bf16 ? 8e-3
                       : m == Method::Int8 ? 0.05
                                           : 1.0;
  EXPECT_LT(err, n == 1 && m != Method::TopK && m != Method::PowerSgd ? 1e-7 : bound)
      << method_name(m) << " n=" << n;
}

TEST_P(ExchangeTest, ErrorFeedbackMakesTheSumOfAppliedUpdatesConverge) {
  auto [m, n] = GetParam();
  if (n == 1 && m != Method::TopK && m != Method::PowerSgd) GTEST_SKIP() << "nothing is dropped";
  const size_t count = 3000;
  const std::vector<TensorShape> shapes = {{0, 50, 60}};
  CompressionOptions with = options(m);
  with.topk_ratio = 0.1;
  CompressionOptions without = with;
  without.error_feedback = false;
  const int steps = 200;
  auto ef = run_steps(n, with, count, steps, shapes);
  auto plain = run_steps(n, without, count, steps, shapes);
  // Conservation: n * sum(applied) + sum over ranks of the last residual == n * sum(average).
  for (size_t i = 0; i < count; ++i) {
    double res = 0;
    for (int r = 0; r < n; ++r) res += ef.residuals[r][i];
    ASSERT_NEAR(n * double(ef.sum_applied[i]) + res, n * double(ef.sum_average[i]),
                1e-3 * (1 + std::fabs(n * ef.sum_average[i])))
        << method_name(m) << " element " << i;
  }
  const double err_ef = relative_error(ef.sum_applied, ef.sum_average);
  const double err_plain = relative_error(plain.sum_applied, plain.sum_average);
  EXPECT_LT(err_ef, 0.1) << method_name(m);
  if (m == Method::TopK || m == Method::PowerSgd) {
    EXPECT_LT(err_ef, err_plain / 3) << method_name(m) << ": " << err_ef << " vs " << err_plain;
  } else {
    EXPECT_LE(err_ef, err_plain) << method_name(m);
  }
}

INSTANTIATE_TEST_SUITE_P(Codecs, ExchangeTest,
                         ::testing::Combine(::testing::Values(Method::Fp16, Method::Bf16,
                                                              Method::Int8, Method::TopK,
                                                              Method::PowerSgd),
                                            ::testing::Values(1, 2, 3, 4)),
                         [](const auto& info) {
                           return std::string(method_name(std::get<0>(info.param))) + "_n" +
                                  std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace cohort::compress
