// The step log, the diagnosis and its recommendations on constructed runs, and the log merger.
#include "cohort/trace/diagnosis.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "cohort/base/error.h"
#include "cohort/trace/log_merge.h"
#include "cohort/trace/step_log.h"

namespace fs = std::filesystem;

namespace cohort::trace {
namespace {

fs::path fresh_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("cohort-diag-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

bool contains(const std::vector<std::string>& lines, const std::string& what) {
  for (const auto& l : lines) {
    if (l.find(what) != std::string::npos) return true;
  }
  return false;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

// A run of `steps` steps on `world` ranks. Every rank loads data for `data` s and computes for
// `compute` s (rank `slow` for `slow_compute` s instead); gradients are ready at the end of that,
// and every rank's sync ends `comm` s after the last rank's gradients were ready.
std::vector<RankSteps> run(int world, int steps, double data, double compute, double comm,
                           int slow = -1, double slow_compute = 0, uint64_t bytes = 1000000,
                           double probe_gbps = 2.0) {
  std::vector<RankSteps> ranks(static_cast<size_t>(world));
  int64_t t = 1'000'000'000;
  for (int s = 1; s <= steps; ++s) {
    double busiest = 0;
    for (int r = 0; r < world; ++r)
      busiest = std::max(busiest, data + (r == slow ? slow_compute : compute));
    for (int r = 0; r < world; ++r) {
      const double busy = data + (r == slow ? slow_compute : compute);
      const double sync = busiest - busy + comm;
      StepRecord rec{.step = s,
                     .epoch = 0,
                     .world = world,
                     .end_us = t + static_cast<int64_t>((busiest + comm) * 1e6),
                     .data_s = data,
                     .compute_s = busy - data,
                     .sync_s = sync,
                     .ready_us = t + static_cast<int64_t>(busy * 1e6),
                     .sent_bytes = bytes,
                     // The rank's collectives: from its readiness to the end of its sync.
                     .collective_us = static_cast<int64_t>(sync * 1e6),
                     .collective_wait_us = 0};
      ranks[static_cast<size_t>(r)].steps.push_back(rec);
    }
    t += static_cast<int64_t>((busiest + comm) * 1e6);
  }
  for (int r = 0; r < world; ++r) {
    auto& rs = ranks[static_cast<size_t>(r)];
    rs.rank = r;
    rs.has_header = true;
    rs.header = {.rank = r,
                 .world = world,
                 .probe_bytes = 4000000,
                 .probe_iterations = 3,
                 .probe_seconds = 0.004,
                 .probe_busbw_gbps = probe_gbps,
                 .algorithm = "auto"};
  }
  return ranks;
}

JobFacts facts(const std::string& compression = "none") {
  return {.name = "t",
          .workers = 3,
          .threads_per_worker = 1,
          .batch_size = 64,
          .model = "mlp",
          .compression = compression,
          .bucket_mb = 25,
          .algorithm = "auto",
          .straggler = {.margin = 0.25, .window = 10}};
}

// Transient stragglers: like run(), but at each step one rank (step % world) computes `extra` s
// longer, and every rank's sync waits for that step's slowest before its `comm` s of exchange.
std::vector<RankSteps> in_turns(int world, int steps, double data, double compute, double extra,
                                double comm) {
  std::vector<RankSteps> ranks = run(world, steps, data, compute, comm);
  for (auto& r : ranks) {
    for (auto& st : r.steps) {
      if (st.step % world != r.rank) continue;
      st.compute_s += extra;
      st.ready_us += static_cast<int64_t>(extra * 1e6);
    }
  }
  for (auto& r : ranks) {
    for (auto& st : r.steps) st.sync_s = data + compute + extra - st.busy_s() + comm;
  }
  return ranks;
}

TEST(Diagnosis, SplitsSyncIntoWaitingForPeersAndCommunication) {
  // Rank 1 computes 50 ms, the others 10 ms; the exchange itself takes 5 ms after the last.
  auto d = diagnose_run(run(3, 30, 0.002, 0.010, 0.005, 1, 0.050), facts(), {});
  ASSERT_EQ(d.ranks.size(), 3u);
  EXPECT_EQ(d.common_steps, 30);
  EXPECT_NEAR(d.ranks[0].wait_s, 0.040, 1e-5);
  EXPECT_NEAR(d.ranks[0].comm_s, 0.005, 1e-5);
  EXPECT_NEAR(d.ranks[1].wait_s, 0.0, 1e-5);
  EXPECT_NEAR(d.ranks[1].comm_s, 0.005, 1e-5);
  EXPECT_NEAR(d.ranks[1].compute_s, 0.050, 1e-9);
  EXPECT_NEAR(d.ranks[0].step_s, d.ranks[1].step_s, 1e-5);  // synchronous: one step time
  ASSERT_EQ(d.stragglers.size(), 1u);
  EXPECT_EQ(d.stragglers[0].rank, 1);
  EXPECT_TRUE(contains(d.recommendations, "rank 1 is a straggler")) << joined(d.recommendations);
  EXPECT_FALSE(contains(d.recommendations, "rank 0 is a straggler"));
  EXPECT_FALSE(contains(d.recommendations, "communication-bound"));
  // The least-waiting rank measures the transfers: 1 MB in 5 ms = 0.2 GB/s against a 2 GB/s probe.
  EXPECT_NEAR(d.achieved_busbw_gbps, 0.2, 0.001);
  EXPECT_TRUE(contains(d.findings, "10% of it")) << joined(d.findings);
  const auto j = d.to_json();
  EXPECT_EQ(j["stragglers"][0]["rank"], 1);
  EXPECT_EQ(j["ranks"].size(), 3u);
  EXPECT_NE(d.text().find("rank 1 (30 steps)"), std::string::npos) << d.text();
}

// Rank 2 is lost after step 20 and the others go on in membership epoch 1, where rank 1 is slow:
// the steps of both epochs split waiting from communication (every rank of each step's world
// reported it), and rank 1 is found a straggler among the ranks of its epoch.
TEST(Diagnosis, AfterAMembershipChangeTheStepsOfEachWorldStillCount) {
  std::vector<RankSteps> first = run(3, 20, 0.002, 0.010, 0.005);
  std::vector<RankSteps> second = run(2, 20, 0.002, 0.010, 0.005, 1, 0.050);
  for (int r = 0; r < 2; ++r) {
    for (StepRecord rec : second[static_cast<size_t>(r)].steps) {
      rec.step += 20;
      rec.epoch = 1;
      rec.end_us += 10'000'000;
      rec.ready_us += 10'000'000;
      first[static_cast<size_t>(r)].steps.push_back(rec);
    }
  }
  const Diagnosis d = diagnose_run(first, facts(), {});
  EXPECT_EQ(d.common_steps, 40);
  ASSERT_EQ(d.ranks.size(), 3u);
  EXPECT_GT(d.ranks[0].wait_s, 0.01);  // it waited for rank 1 in the second epoch
  ASSERT_EQ(d.stragglers.size(), 1u);
  EXPECT_EQ(d.stragglers[0].rank, 1);
}

TEST(Diagnosis, CommunicationBoundAdvice) {
  // 60% of the step is the exchange, far below the probe's bandwidth: compression and buckets.
  auto d = diagnose_run(run(2, 20, 0.001, 0.003, 0.006, -1, 0, 100000, 2.0), facts(), {});
  const std::string all = joined(d.recommendations);
  EXPECT_TRUE(contains(d.recommendations, "communication-bound: 60% of each step")) << all;
  EXPECT_TRUE(contains(d.recommendations, "comm.compression: int8")) << all;
  EXPECT_TRUE(contains(d.recommendations, "a larger comm.bucket_mb (now 25)")) << all;
  EXPECT_TRUE(d.stragglers.empty());

  // At the probe's bandwidth already, with compression on: no bucket advice; stronger codecs.
  auto near =
      diagnose_run(run(2, 20, 0.001, 0.003, 0.006, -1, 0, 11000000, 2.0), facts("fp16"), {});
  const std::string all2 = joined(near.recommendations);
  EXPECT_TRUE(contains(near.recommendations, "communication-bound")) << all2;
  EXPECT_FALSE(contains(near.recommendations, "comm.bucket_mb")) << all2;
  EXPECT_TRUE(contains(near.recommendations, "comm.compression: int8 or powersgd")) << all2;
  EXPECT_TRUE(contains(near.recommendations, "already reach 92%")) << all2;
}

TEST(Diagnosis, DataAndComputeBoundAdvice) {
  auto data = diagnose_run(run(2, 20, 0.006, 0.003, 0.001), facts(), {});
  EXPECT_TRUE(contains(data.recommendations, "data-loading-bound: 60% of each step"))
      << joined(data.recommendations);
  EXPECT_TRUE(contains(data.recommendations, "train.batch_size (now 64)"));
  auto compute = diagnose_run(run(2, 20, 0.0001, 0.009, 0.0009), facts(), {});
  EXPECT_TRUE(contains(compute.recommendations, "compute-bound: 90%"))
      << joined(compute.recommendations);
  EXPECT_EQ(compute.recommendations.size(), 1u);
}

// What local SGD would have made of the measured steps: with a persistent straggler only the
// communication is saved; with stragglers that move between ranks, the waits average out too.
TEST(Diagnosis, EstimatesWhatLocalSgdWouldChange) {
  // Rank 1 computes 50 ms, the others 10 ms, 5 ms of exchange: 57 ms a step as run; per period
  // of 8 local SGD takes the straggler's 8 x 52 ms plus one exchange: 52.6 ms a step.
  auto persistent = diagnose_run(run(3, 32, 0.002, 0.010, 0.005, 1, 0.050), facts(), {});
  ASSERT_TRUE(persistent.local_sgd);
  EXPECT_EQ(persistent.local_sgd->steps, 32);
  EXPECT_NEAR(persistent.local_sgd->measured_s, 0.057, 1e-5);
  EXPECT_NEAR(persistent.local_sgd->local_sgd_s, 0.052 + 0.005 / 8, 1e-5);
  EXPECT_FALSE(contains(persistent.recommendations, "sync.mode: local_sgd"))
      << "a 1.08x estimate is not worth a change of mode: " << joined(persistent.recommendations);

  // Communication-bound (6 ms of exchange after 4 ms of work): 10 ms a step, 4.75 ms with local
  // SGD.
  auto bound = diagnose_run(run(2, 24, 0.001, 0.003, 0.006), facts(), {});
  ASSERT_TRUE(bound.local_sgd);
  EXPECT_NEAR(bound.local_sgd->speedup(), 0.010 / (0.004 + 0.006 / 8), 1e-3);
  EXPECT_TRUE(contains(bound.recommendations, "with sync.mode: local_sgd and sync.period: 8"))
      << joined(bound.recommendations);
  EXPECT_TRUE(contains(bound.recommendations, "4.8 ms per step instead of 10.0 ms (2.11x)"))
      << joined(bound.recommendations);

  // Transient stragglers: each step another rank is 40 ms slower; a period's busiest rank is
  // slow one step in three, so local SGD waits far less than every step's slowest.
  std::vector<RankSteps> moving = in_turns(3, 24, 0.002, 0.010, 0.040, 0.002);
  auto transient = diagnose_run(moving, facts(), {});
  ASSERT_TRUE(transient.local_sgd);
  EXPECT_NEAR(transient.local_sgd->measured_s, 0.054, 1e-5);
  // Per period of 8 steps the busiest rank is slow on 3 of them: (8 x 12 + 3 x 40 + 2) / 8 ms.
  EXPECT_NEAR(transient.local_sgd->local_sgd_s, (8 * 0.012 + 3 * 0.040 + 0.002) / 8, 1e-4);
  EXPECT_TRUE(contains(transient.recommendations, "sync.mode: local_sgd"))
      << joined(transient.recommendations);

  // Not for a run that already uses local SGD.
  JobFacts local = facts();
  local.sync_mode = "local_sgd";
  EXPECT_FALSE(diagnose_run(run(2, 24, 0.001, 0.003, 0.006), local, {}).local_sgd);
}

// A Python program's run: the same numbers, advice in terms of what its script can change.
TEST(Diagnosis, APythonProgramsAdviceNamesWhatItsScriptCanChange) {
  JobFacts python = facts();
  python.program = "train.py";
  auto bound = diagnose_run(run(2, 24, 0, 0.004, 0.006, -1, 0, 100000, 0), python, {});
  const std::string all = joined(bound.recommendations);
  EXPECT_TRUE(contains(bound.recommendations, "communication-bound: 60% of each step")) << all;
  EXPECT_TRUE(contains(bound.recommendations, "cohort.hooks.int8")) << all;
  EXPECT_TRUE(contains(bound.recommendations, "PeriodicModelAverager")) << all;
  for (const char* key : {"comm.compression", "sync.mode", "comm.bucket_mb", "train."}) {
    EXPECT_FALSE(contains(bound.recommendations, key)) << key << ": " << all;
  }
  EXPECT_NE(bound.text().find("a Python program (train.py)"), std::string::npos) << bound.text();
  EXPECT_EQ(bound.text().find("no transport probe"), std::string::npos) << bound.text();

  auto slow = diagnose_run(run(3, 30, 0, 0.010, 0.002, 1, 0.040, 100000, 0), python, {});
  EXPECT_TRUE(contains(slow.recommendations, "rank 1 is a straggler"))
      << joined(slow.recommendations);
  EXPECT_TRUE(contains(slow.recommendations, "torch.set_num_threads"))
      << joined(slow.recommendations);
  EXPECT_FALSE(contains(slow.recommendations, "threads_per_worker"));
  EXPECT_FALSE(contains(slow.recommendations, "sync.mode: ssp"));
}

TEST(Diagnosis, EstimatesWhatSspWouldChange) {
  // A persistent straggler (50 ms against 10 ms): it still trains all of its own steps, 52 ms and
  // one 5 ms exchange each, which is what the run took. Nothing to recommend.
  auto persistent = diagnose_run(run(3, 32, 0.002, 0.010, 0.005, 1, 0.050), facts(), {});
  ASSERT_TRUE(persistent.ssp);
  EXPECT_EQ(persistent.ssp->steps, 32);
  EXPECT_NEAR(persistent.ssp->measured_s, 0.057, 1e-5);
  EXPECT_NEAR(persistent.ssp->ssp_s, 0.057, 1e-5);
  EXPECT_FALSE(contains(persistent.recommendations, "sync.mode: ssp"))
      << joined(persistent.recommendations);

  // Transient stragglers: each step another rank is 40 ms slower. Allreduce waits for that rank
  // every step (54 ms a step); with a staleness of 3 every rank goes at its own mean pace, 12, 12
  // and 52 ms of work plus 2 ms of exchange per three steps.
  std::vector<RankSteps> moving = in_turns(3, 24, 0.002, 0.010, 0.040, 0.002);
  auto transient = diagnose_run(moving, facts(), {});
  ASSERT_TRUE(transient.ssp);
  EXPECT_NEAR(transient.ssp->measured_s, 0.054, 1e-5);
  // Each fast rank also waits for the slow one's gradient, up to half its own mean step (27.3 ms):
  // more than the 27.3 ms a step of going at its own pace, less than allreduce's 54.
  EXPECT_EQ(transient.ssp->fresh_wait, 0.5);
  EXPECT_GT(transient.ssp->ssp_s, (0.012 + 0.012 + 0.052 + 3 * 0.002) / 3 + 2e-3);
  EXPECT_LT(transient.ssp->ssp_s, 0.054 / 1.25);
  EXPECT_TRUE(contains(transient.recommendations, "with sync.mode: ssp, sync.staleness: 3"))
      << joined(transient.recommendations);
  EXPECT_TRUE(contains(transient.recommendations, "sync.fresh_wait: 0.5"))
      << joined(transient.recommendations);
  EXPECT_TRUE(transient.to_json().contains("ssp_estimate"));
  EXPECT_EQ(transient.to_json()["ssp_estimate"]["fresh_wait"], 0.5);
}

// The fresh wait by hand: 2 ranks take turns at being slow (30 ms against 10 ms of work, 2 ms of
// exchange; allreduce's step is 32 ms). With ssp each rank's mean step is 22 ms, so it waits up to
// 11 ms for the other's gradient. In each pair of steps the slow rank pushes at 32 ms and the fast
// one at 12 ms and waits until 23 ms; then the first pushes at 44 ms and waits for the second,
// which pushes at 23 + 32 = 55 ms (44 + 11 = 55: the wait runs out at the same time). Both end
// each pair at 55 ms: 27.5 ms a step, where going at its own pace without waiting gives 22.
TEST(Diagnosis, SspEstimateWaitsForAFreshModelUpToFreshWait) {
  std::vector<RankSteps> turns = in_turns(2, 24, 0.0, 0.010, 0.020, 0.002);
  auto d = diagnose_run(turns, facts(), {});
  ASSERT_TRUE(d.ssp);
  EXPECT_NEAR(d.ssp->measured_s, 0.032, 1e-5);
  EXPECT_NEAR(d.ssp->ssp_s, 0.0275, 1e-4) << d.ssp->steps << " steps";
}

TEST(Diagnosis, FailedAndHungRunsLeadWithTheirCause) {
  RunOutcome o{.status = "failed", .error = "rank 1: a collective timed out"};
  o = read_hang_report(
      "a collective timed out: rank 1: ...\n\nhang report\n\nrank 1 never entered allreduce #7 "
      "(bucket 0, 0.2 MB);\nrank 0 has waited 3.0 s\n\nrank 0: waiting\n",
      o);
  EXPECT_EQ(o.hang_cause, "a collective timed out: rank 1: ...");
  EXPECT_EQ(o.hang_headline,
            "rank 1 never entered allreduce #7 (bucket 0, 0.2 MB); rank 0 has waited 3.0 s");
  auto d = diagnose_run(run(2, 5, 0.001, 0.003, 0.001), facts(), o);
  ASSERT_FALSE(d.recommendations.empty());
  EXPECT_EQ(d.recommendations[0].rfind("the run hung: rank 1 never entered allreduce #7", 0), 0u)
      << d.recommendations[0];
  EXPECT_TRUE(contains(d.findings, "the run failed: rank 1: a collective timed out"));
  EXPECT_EQ(d.to_json()["hang"]["headline"], o.hang_headline);
  // No steps at all (it hung before the first): still a report.
  auto none = diagnose_run({}, facts(), o);
  EXPECT_TRUE(none.ranks.empty());
  EXPECT_FALSE(none.recommendations.empty());
}

TEST(StepLog, WritesHeaderAndStepsAndReadsThemBack) {
  auto dir = fresh_dir("steplog");
  {
    StepLog log((dir / "steps" / "rank-1.jsonl").string());
    log.header({.rank = 1,
                .world = 2,
                .clock_offset_us = -42,
                .probe_bytes = 4000000,
                .probe_iterations = 3,
                .probe_seconds = 0.002,
                .probe_busbw_gbps = 2.0,
                .algorithm = "ring"});
    for (int s = 1; s <= 1000; ++s) {
      log.append({.step = s,
                  .world = 2,
                  .data_s = 0.001,
                  .compute_s = 0.002,
                  .sync_s = 0.0005,
                  .ready_us = s * 1000,
                  .sent_bytes = 10});
    }
  }
  std::ofstream(dir / "steps" / "rank-1.jsonl", std::ios::app) << "{\"type\": \"step\", \"st";
  std::ofstream(dir / "steps" / "notes.txt") << "not a rank\n";
  std::ofstream(dir / "steps" / "rank-x.jsonl") << "not a rank\n";
  std::ofstream(dir / "steps" / "rank-.jsonl") << "not a rank\n";
  EXPECT_EQ(rank_of_file("rank-12.log", ".log"), 12);
  EXPECT_EQ(rank_of_file("rank-12.log", ".jsonl"), std::nullopt);
  EXPECT_EQ(rank_of_file("rank-1a.log", ".log"), std::nullopt);
  auto all = read_step_logs(dir.string());
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].rank, 1);
  ASSERT_TRUE(all[0].has_header);
  EXPECT_EQ(all[0].header.clock_offset_us, -42);
  EXPECT_EQ(all[0].header.algorithm, "ring");
  ASSERT_EQ(all[0].steps.size(), 1000u);
  EXPECT_EQ(all[0].steps[999].step, 1000);
  EXPECT_DOUBLE_EQ(all[0].steps[0].busy_s(), 0.003);
  EXPECT_EQ(all[0].bad_lines, 1u);  // the line cut off by a crash
  fs::remove_all(dir);
}

TEST(LogMerge, MergesInTimeOrderKeepsContinuationsAndFiltersByRank) {
  auto dir = fresh_dir("logs");
  fs::create_directories(dir / "logs");
  std::ofstream(dir / "logs" / "launcher.log")
      << "2026-11-30T09:00:00.000 I [-] job 'x': 2 workers\n"
      << "2026-11-30T09:00:02.000 I [-] job completed\n";
  std::ofstream(dir / "logs" / "rank-0.log")
      << "2026-11-30T09:00:00.500 I [-] joined job 'x' as rank 0 of 2\n"
      << "2026-11-30T09:00:01.000 I [r0 e0 s3] step three\n";
  std::ofstream(dir / "logs" / "rank-1.log")
      << "2026-11-30T09:00:00.700 E [r1 e0 s2] failed\n"
      << "  a continuation line\n"
      << "2026-11-30T09:00:01.000 I [r1 e0 s3] same time as rank 0\n";
  auto all = merge_logs(dir.string());
  ASSERT_EQ(all.size(), 7u);
  EXPECT_EQ(all[0], "2026-11-30T09:00:00.000 I [-] job 'x': 2 workers");
  EXPECT_EQ(all[1], "2026-11-30T09:00:00.500 I [r0] joined job 'x' as rank 0 of 2");
  EXPECT_EQ(all[2], "2026-11-30T09:00:00.700 E [r1 e0 s2] failed");
  EXPECT_EQ(all[3], "  a continuation line");
  EXPECT_EQ(all[4], "2026-11-30T09:00:01.000 I [r0 e0 s3] step three");
  EXPECT_EQ(all[5], "2026-11-30T09:00:01.000 I [r1 e0 s3] same time as rank 0");
  EXPECT_EQ(all[6], "2026-11-30T09:00:02.000 I [-] job completed");
  auto one = merge_logs(dir.string(), 1);
  ASSERT_EQ(one.size(), 3u);
  EXPECT_EQ(one[1], "  a continuation line");
  EXPECT_TRUE(is_run_dir(dir.string()));
  EXPECT_FALSE(is_run_dir((dir / "logs").string()));
  EXPECT_THROW(merge_logs(dir.string(), 5), Error);
  EXPECT_THROW(merge_logs((dir / "logs").string()), Error);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace cohort::trace
