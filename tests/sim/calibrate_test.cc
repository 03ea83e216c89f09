// Calibration's arithmetic on inputs with known answers: a timeline read into compute, a
// bandwidth fitted through the simulator, and the sweep's choices.
#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "cohort/base/error.h"
#include "cohort/sim/calibrate.h"
#include "cohort/sim/closed_form.h"
#include "cohort/sim/step.h"
#include "cohort/sim/sweep.h"

namespace cohort::sim {
namespace {

using nlohmann::json;

// A timeline of `steps` steps: data 1 ms, forward 10, backward 20, optimizer 2 (microseconds in
// the file), and one "bucket B ready" instant per bucket at the given fractions of backward.
json timeline(int steps, const std::vector<double>& ready_fraction) {
  json events = json::array();
  double t = 1e6;
  for (int s = 1; s <= steps; ++s) {
    auto span = [&](const char* name, double us) {
      events.push_back({{"ph", "X"}, {"name", name}, {"ts", t}, {"dur", us}, {"args", {{"step", s}}}});
      t += us;
    };
    span("data", 1000);
    span("forward", 10000);
    const double backward_start = t;
    span("backward", 20000);
    for (size_t b = 0; b < ready_fraction.size(); ++b) {
      events.push_back({{"ph", "i"}, {"name", "bucket " + std::to_string(b) + " ready"},
                        {"ts", backward_start + ready_fraction[b] * 20000}, {"args", {{"bytes", 4}}}});
    }
    span("optimizer", 2000);
  }
  return {{"traceEvents", events}};
}

std::vector<Gradient> grads(const std::vector<uint64_t>& bytes) {
  std::vector<Gradient> g;
  for (uint64_t b : bytes) g.push_back(Gradient{.name = "g", .bytes = b, .rows = 1, .cols = b / 4});
  return g;
}

TEST(Calibrate, TheTimelineGivesEachPhaseAndEachGradientsTime) {
  // Buckets of one gradient each after the first, which holds 1 MiB: the first two share it.
  const auto g = grads({512 << 10, 512 << 10, 4 << 20, 4 << 20});
  const Compute c = compute_from_trace(timeline(12, {0.1, 0.5, 0.9}), g, 1e-6, 2);
  EXPECT_NEAR(c.data_s, 0.001, 1e-9);
  EXPECT_NEAR(c.forward_s, 0.010, 1e-9);
  EXPECT_NEAR(c.backward_s, 0.020, 1e-9);
  EXPECT_NEAR(c.optimizer_s, 0.002, 1e-9);
  ASSERT_EQ(c.gradients.size(), 4u);
  // The first bucket's two gradients share its time by their bytes: halfway and at its end.
  EXPECT_NEAR(c.gradients[0].ready_s, 0.001, 1e-9);
  EXPECT_NEAR(c.gradients[1].ready_s, 0.002, 1e-9);
  EXPECT_NEAR(c.gradients[2].ready_s, 0.010, 1e-9);
  EXPECT_NEAR(c.gradients[3].ready_s, 0.018, 1e-9);
}

TEST(Calibrate, ATimelineWithoutWhatItNeedsIsRefused) {
  EXPECT_THROW(compute_from_trace(json::object(), grads({4}), 1e-6, 0), Error);
  EXPECT_THROW(compute_from_trace(timeline(3, {0.5}), grads({4}), 1e-6, 2), Error);  // too few steps
  // More buckets in the timeline than the model has.
  EXPECT_THROW(compute_from_trace(timeline(12, {0.1, 0.5}), grads({4}), 1e-6, 2), Error);
  // A bucket the timeline never timed.
  EXPECT_THROW(compute_from_trace(timeline(12, {0.1}), grads({2 << 20, 2 << 20}), 1e-6, 2), Error);
}

Profile two_ranks() {
  Profile p;
  p.name = "fit";
  p.cores = 2;
  p.tcp = {.latency_s = 20e-6, .bytes_per_s = 2e9};
  p.network = p.tcp;
  p.reduce_bytes_per_s = 8e9;
  return p;
}

TEST(Calibrate, TheFittedBandwidthReproducesTheMeasuredTime) {
  Profile p = two_ranks();
  // What the simulator says a 16 MiB ring takes at 2 GB/s is what a fit on that time must give back.
  Profile q = p;
  q.compute.backward_s = 1e-9;
  q.compute.gradients = grads({16 << 20});
  const double t =
      simulate(q, {.workers = 2, .ranks_per_host = 2}, {.algorithm = comm::Algorithm::Ring, .bucket_mb = 1e6})
          .exposed_comm_s;
  p.tcp.bytes_per_s = 1;  // forgotten: the fit finds it
  const double fitted = fit_bandwidth(p, comm::Transport::Tcp, comm::Algorithm::Ring, 16 << 20, t);
  EXPECT_NEAR(fitted, 2e9, 2e9 * 1e-4);
  EXPECT_THROW(fit_bandwidth(p, comm::Transport::Tcp, comm::Algorithm::Ring, 1000, t), Error);
}

// Four ranks on two cores, an 8-byte bucket by recursive doubling: two exchanges, one message
// each way in each.
Profile crowded_host(double oversubscribed_latency_s) {
  Profile p = two_ranks();
  p.cores = 2;
  p.tcp.oversubscribed_latency_s = oversubscribed_latency_s;
  p.compute.backward_s = 1e-9;
  p.compute.gradients = grads({8});
  return p;
}

double rd_time(const Profile& p, int ranks) {
  return simulate(p, {.workers = ranks, .ranks_per_host = ranks},
                  {.algorithm = comm::Algorithm::RecursiveDoubling, .bucket_mb = 1e6})
      .exposed_comm_s;
}

TEST(Calibrate, AMessageWaitsForAReceiverWithoutACore) {
  const Profile alone = crowded_host(0), crowded = crowded_host(50e-6);
  // Two ranks on two cores: each has a core, nothing changes.
  EXPECT_DOUBLE_EQ(rd_time(crowded, 2), rd_time(alone, 2));
  // Four on two: each of the two exchanges' messages takes the measured 50 us instead of 20.
  EXPECT_NEAR(rd_time(crowded, 4) - rd_time(alone, 4), 2 * 30e-6, 1e-9);
  // Eight on two: three threads per core beyond one, three times the wait, in three exchanges.
  EXPECT_NEAR(rd_time(crowded, 8) - rd_time(alone, 8), 3 * 3 * 30e-6, 1e-9);
  EXPECT_DOUBLE_EQ(receiver_wait_s(crowded.tcp, 1.0), 0);
  EXPECT_NEAR(receiver_wait_s(crowded.tcp, 1.5), 15e-6, 1e-15);
  EXPECT_DOUBLE_EQ(receiver_wait_s(alone.tcp, 4.0), 0);  // not measured: no wait
  // A wait that grows faster than the threads: at three per core, (3 - 1)^1.5 times the one at two.
  Profile faster = crowded;
  faster.tcp.oversubscribed_exponent = 1.5;
  EXPECT_NEAR(receiver_wait_s(faster.tcp, 3.0), 30e-6 * std::pow(2.0, 1.5), 1e-15);
  EXPECT_NEAR(rd_time(faster, 4), rd_time(crowded, 4), 1e-12);  // the same at two per core
  EXPECT_NEAR(rd_time(faster, 8) - rd_time(alone, 8), 3 * std::pow(3.0, 1.5) * 30e-6, 1e-9);
  // The closed form charges it too.
  const Choice rd{.algorithm = comm::Algorithm::RecursiveDoubling, .bucket_mb = 1e6};
  EXPECT_NEAR(closed_form_step_s(crowded, {.workers = 4, .ranks_per_host = 4}, rd) -
                  closed_form_step_s(alone, {.workers = 4, .ranks_per_host = 4}, rd),
              2 * 30e-6, 1e-9);
}

TEST(Calibrate, TheFittedOversubscribedLatencyReproducesTheMeasuredTime) {
  const double t = rd_time(crowded_host(50e-6), 4);
  Profile p = crowded_host(0);  // forgotten: the fit finds it
  EXPECT_NEAR(fit_oversubscribed_latency(p, comm::Transport::Tcp, 4, t), 50e-6, 1e-10);
  // Faster than with a core each: no wait at all.
  EXPECT_DOUBLE_EQ(fit_oversubscribed_latency(p, comm::Transport::Tcp, 4, rd_time(p, 4) / 2), 20e-6);
  EXPECT_THROW(fit_oversubscribed_latency(p, comm::Transport::Tcp, 2, t), Error);  // not crowded
}

TEST(Calibrate, TheFittedExponentReproducesTheMeasuredTimeWithFourTimesTheRanks) {
  Profile truth = crowded_host(50e-6);
  truth.tcp.oversubscribed_exponent = 1.4;
  const double t = rd_time(truth, 8);
  Profile p = crowded_host(50e-6);  // the latency at two per core known, the exponent not
  EXPECT_NEAR(fit_oversubscribed_exponent(p, comm::Transport::Tcp, 8, t), 1.4, 1e-6);
  EXPECT_THROW(fit_oversubscribed_exponent(p, comm::Transport::Tcp, 4, t), Error);  // two per core
  // Without a wait at two per core there is nothing to grow.
  EXPECT_DOUBLE_EQ(fit_oversubscribed_exponent(crowded_host(0), comm::Transport::Tcp, 8, t), 1);
}

TEST(Calibrate, ComputeSlowsWithTheCoresInUse) {
  Profile p = two_ranks();
  p.cores = 4;
  p.compute.shared_slowdown = 1.3;
  EXPECT_DOUBLE_EQ(compute_slowdown(p, {.workers = 1}), 1.0);
  EXPECT_NEAR(compute_slowdown(p, {.workers = 4, .ranks_per_host = 4}), 1.3, 1e-12);
  EXPECT_NEAR(compute_slowdown(p, {.workers = 8, .ranks_per_host = 8}), 1.3, 1e-12);  // no more than all
  p.compute.oversubscribed_slowdown = 1.2;
  EXPECT_NEAR(compute_slowdown(p, {.workers = 4, .ranks_per_host = 4}), 1.3, 1e-12);  // one per core
  EXPECT_NEAR(compute_slowdown(p, {.workers = 6, .ranks_per_host = 6}), 1.3 * 1.1, 1e-12);
  EXPECT_NEAR(compute_slowdown(p, {.workers = 8, .ranks_per_host = 8}), 1.3 * 1.2, 1e-12);
  EXPECT_NEAR(compute_slowdown(p, {.workers = 16, .ranks_per_host = 16}), 1.3 * 1.2, 1e-12);
  EXPECT_NEAR(compute_slowdown(p, {.workers = 2, .ranks_per_host = 2}), 1.1, 1e-12);  // 1 of 3 others
  EXPECT_NEAR(compute_slowdown(p, {.workers = 4, .ranks_per_host = 1, .one_machine = true}), 1.3, 1e-12);
  p.compute.on_device = true;
  EXPECT_DOUBLE_EQ(compute_slowdown(p, {.workers = 4, .ranks_per_host = 4}), 1.0);
}

TEST(Sweep, TheJobComesFirstAndTheFastestIsNamed) {
  Profile p = two_ranks();
  p.compute.on_device = true;
  p.compute.batch_per_worker = 8;
  p.compute.backward_s = 0.010;
  p.compute.forward_s = 0.005;
  p.compute.gradients = grads({4 << 20, 4 << 20});
  p.compute.gradients[0].ready_s = 0.005;
  p.compute.gradients[1].ready_s = 0.010;
  const Layout l{.workers = 8, .ranks_per_host = 2};
  const SweepWorld w = sweep(p, l, {.algorithm = comm::Algorithm::Ring, .bucket_mb = 64}, {});
  ASSERT_GT(w.rows.size(), 5u);
  EXPECT_EQ(w.rows[0].varied, "job");
  EXPECT_EQ(w.rows[0].choice.algorithm, comm::Algorithm::Ring);
  bool hierarchical = false, local_sgd = false;
  for (const SweepRow& r : w.rows) {
    EXPECT_GE(r.prediction.step_s, w.rows[w.best].prediction.step_s);
    hierarchical |= r.choice.algorithm == comm::Algorithm::Hierarchical;
    local_sgd |= r.choice.sync == SyncMode::LocalSgd;
  }
  EXPECT_TRUE(hierarchical);  // 2 ranks per host on 4 hosts
  EXPECT_TRUE(local_sgd);
  // Without codec costs in the profile, no codec is tried.
  for (const SweepRow& r : w.rows) EXPECT_EQ(r.choice.compression.method, compress::Method::None);
  EXPECT_EQ(sweep(p, l, {}, {.only_job = true}).rows.size(), 1u);
}

}  // namespace
}  // namespace cohort::sim
