// The simulator on cases with known answers, and the plans of the real algorithms.
#include <gtest/gtest.h>

#include <cmath>

#include "cohort/base/error.h"
#include "cohort/comm/algorithms.h"
#include "cohort/sim/closed_form.h"
#include "cohort/sim/flows.h"
#include "cohort/sim/plan.h"
#include "cohort/sim/program.h"
#include "cohort/sim/step.h"
#include "cohort/sim/sweep.h"

namespace cohort::sim {
namespace {

// A profile of round figures: compute on a device of its own (so nothing shares cores), every
// link 1 GB/s with 10 us latency, reductions at 2 GB/s.
Profile round_profile(std::vector<Gradient> grads, double backward_s) {
  Profile p;
  p.name = "round";
  p.cores = 8;
  p.tcp = {.latency_s = 10e-6, .bytes_per_s = 1e9};
  p.shm = LinkCost{.latency_s = 10e-6, .bytes_per_s = 1e9};
  p.network = {.latency_s = 10e-6, .bytes_per_s = 1e9};
  p.reduce_bytes_per_s = 2e9;
  p.compute.on_device = true;
  p.compute.batch_per_worker = 32;
  p.compute.forward_s = 0.010;
  p.compute.backward_s = backward_s;
  p.compute.gradients = std::move(grads);
  return p;
}

Gradient grad(uint64_t bytes, double ready_s) {
  return Gradient{.name = "g", .bytes = bytes, .rows = 1, .cols = bytes / 4, .ready_s = ready_s};
}

TEST(FlowNet, TwoFlowsOnOneLinkShareItsBandwidth) {
  FlowNet net;
  const uint32_t link = net.add_resource(1e9);
  net.start(0, 1e6, 1e9, {{link, 1}}, 1);
  net.start(0, 1e6, 1e9, {{link, 1}}, 2);
  // Each gets half: both finish at 2 ms, not one at 1 ms and one at 2 ms.
  EXPECT_NEAR(net.next_finish(), 2e-3, 1e-12);
  net.finish_next();
  EXPECT_NEAR(net.next_finish(), 2e-3, 1e-12);
  net.finish_next();
  EXPECT_EQ(net.running(), 0u);
  EXPECT_NEAR(net.used(link), 2e6, 1);
}

TEST(FlowNet, AFlowThatStartsLaterGetsItsShareFromThen) {
  FlowNet net;
  const uint32_t link = net.add_resource(1e9);
  net.start(0, 2e6, 1e9, {{link, 1}}, 1);  // alone for 1 ms: 1e6 done
  EXPECT_NEAR(net.next_finish(), 2e-3, 1e-12);
  net.start(1e-3, 1e6, 1e9, {{link, 1}}, 2);  // from then on half each: both end at 3 ms
  EXPECT_NEAR(net.next_finish(), 3e-3, 1e-9);
  EXPECT_EQ(net.finish_next() + net.finish_next(), 3u);
}

TEST(FlowNet, AFlowCappedElsewhereLeavesTheRestToTheOthers) {
  FlowNet net;
  const uint32_t link = net.add_resource(1e9);
  net.start(0, 1e5, 1e8, {{link, 1}}, 1);  // at most 100 MB/s
  net.start(0, 9e5, 1e9, {{link, 1}}, 2);  // gets the other 900 MB/s
  EXPECT_NEAR(net.next_finish(), 1e-3, 1e-9);
  net.finish_next();
  EXPECT_NEAR(net.next_finish(), 1e-3, 1e-9);
}

TEST(FlowNet, CoresAreSharedByTheTasksOnThem) {
  FlowNet net;
  const uint32_t cpu = net.add_resource(2);  // two cores, three one-core tasks of 1 s each
  for (uint64_t t = 0; t < 3; ++t) net.start(0, 1, 1, {{cpu, 1}}, t);
  EXPECT_NEAR(net.next_finish(), 1.5, 1e-9);
}

TEST(Plan, TheRingsPlanIsItsSchedule) {
  const std::vector<int> hosts = {0, 1, 2, 3};
  auto plans = plan_collective({.algorithm = comm::Algorithm::Ring, .count = 1000}, hosts,
                               [](comm::WorkKind, size_t bytes) { return bytes * 1e-9; });
  ASSERT_EQ(plans.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    const RankPlan& p = plans[static_cast<size_t>(r)];
    ASSERT_EQ(p.exchanges.size(), 1u);  // one pipelined exchange of 2(n - 1) steps
    const Exchange& x = p.exchanges[0];
    EXPECT_EQ(x.send_to, (r + 1) % 4);
    EXPECT_EQ(x.recv_from, (r + 3) % 4);
    uint64_t items = 0, bytes = 0;
    double work = 0;
    for (const sim::Run& run : x.recv) {
      items += run.count;
      bytes += run.count * run.bytes;
      work += run.count * run.work_s;
    }
    EXPECT_EQ(items, 6u);
    EXPECT_EQ(bytes, 2u * 3 * 1000);  // 2(n-1)/n of 4000 bytes
    EXPECT_NEAR(work, 4000e-9, 1e-15);  // 3 blocks of 1000 bytes reduced, then one divided (Avg)
    EXPECT_EQ(p.bytes_sent, 6000u);
  }
}

TEST(Plan, HalvingDoublingTalksToItsPartnersInOrder) {
  const std::vector<int> hosts(8, 0);
  auto plans = plan_collective({.algorithm = comm::Algorithm::HalvingDoubling, .count = 4096},
                               hosts, [](comm::WorkKind, size_t) { return 0.0; });
  const RankPlan& p = plans[0];
  ASSERT_EQ(p.exchanges.size(), 6u);  // log2(8) halving steps, then log2(8) doubling steps
  const int partners[] = {1, 2, 4, 4, 2, 1};
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(p.exchanges[i].send_to, partners[i]);
    EXPECT_EQ(p.exchanges[i].recv_from, partners[i]);
  }
}

// Top-k's gather is planned as the codec runs it (comm::allgatherv_ring): a ring of the counts
// (one 8-byte count per step), then one exchange per block around the ring, n - 1 of them.
TEST(Plan, TopKsGatherIsTheCountsRingThenABlockPerStep) {
  const std::vector<int> hosts = {0, 1, 2, 3};
  auto plans = plan_collective({.kind = CollectiveSpec::Kind::Allgatherv, .count = 500}, hosts,
                               [](comm::WorkKind, size_t) { return 0.0; });
  ASSERT_EQ(plans.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    const RankPlan& p = plans[static_cast<size_t>(r)];
    ASSERT_EQ(p.exchanges.size(), 1u + 3u) << "rank " << r;
    for (const Exchange& x : p.exchanges) {
      EXPECT_EQ(x.send_to, (r + 1) % 4);
      EXPECT_EQ(x.recv_from, (r + 3) % 4);
    }
    EXPECT_EQ(p.bytes_sent, 3u * 8 + 3u * 500 * 4);
  }
}

// fp16's allreduce is n^2 planned exchanges: past kMaxEncodedWorkers it is refused by name (it
// would not fit in memory), and a sweep there leaves the dense codecs out instead of failing.
TEST(Simulate, DenseCodecsBeyondTheirLimitAreRefusedAndLeftOutOfTheSweep) {
  Profile p = round_profile({grad(64 << 10, 0.001)}, 0.001);
  p.codecs["fp16"] = CodecCost{.encode_bytes_per_s = 1e9, .decode_bytes_per_s = 1e9};
  Choice fp16;
  fp16.compression.method = compress::Method::Fp16;
  fp16.compression.min_bytes = 0;
  const Layout big{.workers = kMaxEncodedWorkers + 1, .ranks_per_host = 1};
  try {
    simulate(p, big, fp16);
    ADD_FAILURE() << "fp16 at " << big.workers << " workers was simulated";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("at most 1024 workers"), std::string::npos) << e.what();
  }
  const SweepWorld w =
      sweep(p, big, Choice{}, {.bucket_mb = {25}, .codecs = true, .local_sgd = false});
  EXPECT_GT(w.rows.size(), 1u);
  for (const SweepRow& r : w.rows) {
    EXPECT_TRUE(r.choice.compression.method != compress::Method::Fp16 &&
                r.choice.compression.method != compress::Method::Bf16 &&
                r.choice.compression.method != compress::Method::Int8)
        << describe(r.choice);
  }
}

TEST(Plan, AThousandRankRingTakesAFewRunsPerRank) {
  const std::vector<int> hosts(1024, 0);
  auto plans = plan_collective({.algorithm = comm::Algorithm::Ring, .count = 1 << 20}, hosts,
                               [](comm::WorkKind, size_t) { return 0.0; });
  size_t runs = 0;
  for (const RankPlan& p : plans) runs += p.exchanges[0].send.size() + p.exchanges[0].recv.size();
  EXPECT_LT(runs / plans.size(), 16u);
}

TEST(Simulate, ARingOnAnIdleNetworkTakesTheTextbookTime) {
  // One bucket of S bytes, ready only when backward ends, so the step is compute + the ring.
  const uint64_t S = 4 << 20;
  for (int n : {2, 3, 4, 8}) {
    Profile p = round_profile({grad(S, 0.020)}, 0.020);
    const Layout l{.workers = n, .ranks_per_host = 1};
    // Segments as large as a block: the ring runs step by step, as the formula assumes.
    const Choice c{.algorithm = comm::Algorithm::Ring, .bucket_mb = 64, .chunk_bytes = S};
    const Prediction got = simulate(p, l, c);
    const Costs costs{.alpha = 10e-6, .beta = 1e-9, .gamma = 0.5e-9};
    // Avg divides the reduced block once more: (n-1)/n S gamma for the sums, S/n for the division.
    const double ring = ring_allreduce_s(n, static_cast<double>(S), costs) + S / n * costs.gamma;
    EXPECT_NEAR(got.step_s, 0.030 + ring, 1e-7) << n << " ranks";  // blocks of S/n bytes, to an element
    EXPECT_NEAR(got.exposed_comm_s, ring, 1e-7);
    EXPECT_NEAR(got.rank_bytes, 2.0 * (n - 1) / n * S, 8);
  }
}

TEST(Simulate, ABucketReadyBeforeBackwardEndsOverlapsCompletely) {
  // 1 MiB ready after 1 ms of a 50 ms backward: its exchange (about 1 ms) is over long before.
  Profile p = round_profile({grad(1 << 20, 0.001), grad(4, 0.050)}, 0.050);
  p.compute.gradients[1].cols = 1;
  const Prediction got = simulate(p, {.workers = 4}, {.algorithm = comm::Algorithm::Ring});
  // The last bucket (4 bytes) is all that is left after backward: a few latencies.
  EXPECT_LT(got.exposed_comm_s, 0.0002);
  EXPECT_NEAR(got.step_s, 0.060, 0.0002);
  EXPECT_EQ(got.buckets, 2u);
}

TEST(Simulate, RanksOnOneHostShareItsLinkInTheHierarchicalAllreduce) {
  // 2 hosts x 4 ranks: the L = 4 pieces cross the hosts at once, each at a quarter of the link.
  const uint64_t S = 16 << 20;
  Profile p = round_profile({grad(S, 0.020)}, 0.020);
  p.shm = LinkCost{.latency_s = 1e-6, .bytes_per_s = 1e12};  // the host's own steps nearly free
  p.reduce_bytes_per_s = 1e15;
  const Layout l{.workers = 8, .ranks_per_host = 4};
  const Choice c{.algorithm = comm::Algorithm::Hierarchical, .bucket_mb = 64, .chunk_bytes = S};
  const Prediction got = simulate(p, l, c);
  // Across: a 2-rank allreduce of S/4 per local rank, 4 at once on a 1 GB/s link: S/4 each way,
  // so S bytes over the link each way in all.
  EXPECT_NEAR(got.exposed_comm_s, static_cast<double>(S) * 1e-9, 0.05 * S * 1e-9);
  EXPECT_NEAR(got.link_bytes, static_cast<double>(S), 64);
}

TEST(Simulate, AutoResolvesAsTheCommunicatorDoesOverWhatCarriesTheHostsPairs) {
  // One bucket of 1 MiB on 16 ranks of one host: the ring over shared memory, halving-doubling
  // over TCP (choose_allreduce), and over TCP too where the profile has no shared memory.
  Profile p = round_profile({grad(comm::kSharedMemoryRingMinBytes, 0.020)}, 0.020);
  const Layout l{.workers = 16, .ranks_per_host = 16};
  EXPECT_EQ(simulate(p, l, {}).algorithms, std::vector<std::string>{"ring"});
  EXPECT_EQ(simulate(p, l, {.transport = comm::Transport::Tcp}).algorithms,
            std::vector<std::string>{"halving_doubling"});
  p.shm.reset();
  EXPECT_EQ(simulate(p, l, {}).algorithms, std::vector<std::string>{"halving_doubling"});
}

TEST(Simulate, OneWorkerAloneIsFullyEfficient) {
  Profile p = round_profile({grad(1 << 20, 0.020)}, 0.020);
  const Prediction got = simulate(p, {.workers = 1}, {});
  EXPECT_DOUBLE_EQ(got.efficiency, 1.0);
  EXPECT_NEAR(got.step_s, 0.030, 1e-12);
  EXPECT_NEAR(got.samples_per_s, 32 / 0.030, 1e-6);
}

TEST(Simulate, RanksThatOutnumberTheCoresShareThem) {
  Profile p = round_profile({grad(4096, 0.020)}, 0.020);
  p.compute.on_device = false;
  p.cores = 2;
  const Prediction two = simulate(p, {.workers = 2, .ranks_per_host = 2}, {});
  const Prediction four = simulate(p, {.workers = 4, .ranks_per_host = 4}, {});
  EXPECT_NEAR(two.compute_s, 0.030, 0.001);
  EXPECT_NEAR(four.compute_s, 0.060, 0.002);  // two ranks per core
}

TEST(Simulate, LocalSgdPaysForOneAveragePerPeriod) {
  const uint64_t S = 8 << 20;
  Profile p = round_profile({grad(S, 0.020)}, 0.020);
  const Layout l{.workers = 4};
  const Prediction every = simulate(p, l, {.algorithm = comm::Algorithm::Ring});
  const Prediction local = simulate(p, l, {.algorithm = comm::Algorithm::Ring, .sync = SyncMode::LocalSgd, .period = 8});
  EXPECT_NEAR(local.exposed_comm_s, every.exposed_comm_s / 8, every.exposed_comm_s * 0.02);
  EXPECT_LT(local.step_s, every.step_s);
}

TEST(Simulate, CodecsNeedTheirCostInTheProfile) {
  Profile p = round_profile({grad(1 << 20, 0.020)}, 0.020);
  Choice c;
  c.compression.method = compress::Method::Fp16;
  EXPECT_THROW(simulate(p, {.workers = 2}, c), Error);
  p.codecs["fp16"] = {.encode_bytes_per_s = 4e9, .decode_bytes_per_s = 4e9};
  const Prediction fp16 = simulate(p, {.workers = 2}, c);
  const Prediction none = simulate(p, {.workers = 2}, {});
  EXPECT_NEAR(fp16.rank_bytes, none.rank_bytes / 2, 64);  // half the bytes of f32
}

TEST(Simulate, ThePowerSgdFactorsAreWhatGoesOnTheWire) {
  Profile p = round_profile({Gradient{.name = "w", .bytes = 4 * 1024 * 1024, .rows = 1024, .cols = 1024,
                                      .ready_s = 0.02}},
                            0.020);
  p.codecs["powersgd"] = {.encode_bytes_per_s = 1e10, .decode_bytes_per_s = 1e10};
  Choice c;
  c.compression.method = compress::Method::PowerSgd;
  c.compression.powersgd_rank = 4;
  const Prediction got = simulate(p, {.workers = 2}, c);
  // P and Q: 1024 x 4 each, f32, half of each sent by each of 2 ranks (ring).
  EXPECT_NEAR(got.rank_bytes, 2 * 1024 * 4 * 4 / 2.0 * 2 / 2 * 2, 64);
}

TEST(Simulate, PowerSgdsSecondFactorAndDecodingOverlapBackward) {
  // A 4 MB matrix ready 2 ms into a 50 ms backward, then a small vector at its end. PowerSGD's
  // P = M Q (2 ms) runs on the training thread when the bucket is ready; its Q = M^T P (2 ms),
  // Q's allreduce and its decoding (4 ms) are chained on the communication thread (Work::then),
  // all within backward: the step is forward + backward + P = M Q, where with Q's part after
  // backward it would be 6 ms longer.
  Profile p = round_profile({Gradient{.name = "w", .bytes = 4 << 20, .rows = 1024, .cols = 1024,
                                      .ready_s = 0.002},
                             grad(4096, 0.050)},
                            0.050);
  p.codecs["powersgd"] = {.encode_bytes_per_s = 1e9, .decode_bytes_per_s = 1e9};
  Choice c;
  c.compression.method = compress::Method::PowerSgd;
  const Prediction got = simulate(p, {.workers = 2}, c);
  EXPECT_NEAR(got.step_s, 0.010 + 0.050 + 0.002, 0.0005);
}

TEST(ClosedForm, AgreesWithTheSimulationOnAnIdleNetwork) {
  const uint64_t S = 64 << 20;
  Profile p = round_profile({grad(S, 0.020)}, 0.020);
  for (auto a : {comm::Algorithm::Ring, comm::Algorithm::HalvingDoubling}) {
    // One segment per transfer: no pipelining of reductions with transfers, as the formulas assume.
    const Choice c{.algorithm = a, .bucket_mb = 128, .chunk_bytes = S};
    const Prediction got = simulate(p, {.workers = 8}, c);
    EXPECT_NEAR(got.closed_form_step_s, got.step_s, 0.01 * got.step_s) << comm::algorithm_name(a);
  }
}

}  // namespace
}  // namespace cohort::sim
