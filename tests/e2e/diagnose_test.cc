// Stragglers named while the job runs, `cohort diagnose` and `cohort logs RUN_DIR` on real runs:
// `cohort run` with worker processes on a small synthetic data set.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "files.h"
#include "shell.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using cohort::e2e::sh;
using cohort::e2e::slurp;

fs::path fresh_dir(const std::string& name) {
  return cohort::e2e::fresh_dir("diagnose", name);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

std::vector<json> events_named(const fs::path& run, const std::string& name) {
  std::vector<json> out;
  for (const auto& line : lines_of(slurp(run / "events.jsonl"))) {
    auto e = json::parse(line, nullptr, false);
    if (!e.is_discarded() && e.value("event", "") == name) out.push_back(e);
  }
  return out;
}

// Three workers, 40 steps; a rank is slow when twice as busy as the others for 10 steps in a row
// (generous: the clean run must not name anyone on a loaded machine).
fs::path run_job(const fs::path& dir, const std::string& extra, int workers = 3,
                 cohort::e2e::Result* result = nullptr) {
  std::ofstream(dir / "job.yaml") << "name: diag\n"
                                  << "workers: " << workers << "\n"
                                  << "model: {name: mlp}\n"
                                  << "data: {name: synthetic, samples: 4096, shape: [1, 8, 8], "
                                     "classes: 4}\n"
                                  << "train: {epochs: 1000, max_steps: 40, batch_size: 16}\n"
                                  << "checkpoint: {every_steps: 0}\n"
                                  << "debug: {straggler_margin: 1.0, straggler_window: 10}\n"
                                  << extra;
  auto r = sh(std::string(COHORT_BINARY) + " run " + (dir / "job.yaml").string() + " --run-dir " +
                  (dir / "run").string(),
              120);
  if (result) *result = r;
  return dir / "run";
}

TEST(Diagnose, TheSlowRankAndOnlyItIsNamedAStraggler) {
  auto dir = fresh_dir("slow");
  cohort::e2e::Result r;
  auto run = run_job(dir, "faults: [{kind: slow, rank: 1, at_step: 0, seconds: 0.05}]\n", 3, &r);
  ASSERT_EQ(r.exit_code, 0) << r.output;

  // Live: one straggler event, rank 1, on the terminal and in the launcher's log.
  auto found = events_named(run, "straggler");
  ASSERT_EQ(found.size(), 1u) << slurp(run / "events.jsonl");
  EXPECT_EQ(found[0]["rank"], 1);
  EXPECT_GT(found[0]["ratio"].get<double>(), 2.0);
  EXPECT_GE(found[0]["last_step"].get<int>() - found[0]["first_step"].get<int>(), 9);
  EXPECT_NE(r.output.find("cohort: rank 1 is a straggler"), std::string::npos) << r.output;
  EXPECT_NE(slurp(run / "logs" / "launcher.log").find("rank 1 is a straggler"), std::string::npos);

  // Every rank recorded every step, after a header with the transport probe.
  for (int rank = 0; rank < 3; ++rank) {
    auto lines = lines_of(slurp(run / "steps" / ("rank-" + std::to_string(rank) + ".jsonl")));
    ASSERT_EQ(lines.size(), 41u) << rank;
    auto header = json::parse(lines[0]);
    EXPECT_EQ(header["type"], "rank");
    EXPECT_GT(header["probe_busbw_gbps"].get<double>(), 0);
    EXPECT_EQ(json::parse(lines[40])["step"], 40);
  }
  EXPECT_GT(json::parse(slurp(run / "summary.json"))["probe_busbw_gbps"].get<double>(), 0);

  // The report names rank 1 and only rank 1; the others wait for it.
  auto text = sh(std::string(COHORT_BINARY) + " diagnose " + run.string(), 30);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("rank 1 is a straggler"), std::string::npos) << text.output;
  EXPECT_EQ(text.output.find("rank 0 is a straggler"), std::string::npos) << text.output;
  EXPECT_EQ(text.output.find("rank 2 is a straggler"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("transport probe"), std::string::npos) << text.output;
  auto js = sh(std::string(COHORT_BINARY) + " diagnose --json " + run.string(), 30);
  ASSERT_EQ(js.exit_code, 0) << js.output;
  auto d = json::parse(js.output);
  EXPECT_EQ(d, json::parse(slurp(run / "diagnosis.json")));
  ASSERT_EQ(d["stragglers"].size(), 1u) << d.dump(2);
  EXPECT_EQ(d["stragglers"][0]["rank"], 1);
  ASSERT_EQ(d["ranks"].size(), 3u);
  EXPECT_EQ(d["common_steps"], 40);
  EXPECT_GT(d["ranks"][1]["compute_s"].get<double>(), 0.045);
  EXPECT_GT(d["ranks"][0]["wait_s"].get<double>(), 0.03) << d.dump(2);
  EXPECT_LT(d["ranks"][1]["wait_s"].get<double>(), d["ranks"][0]["wait_s"].get<double>());
  EXPECT_GT(d["achieved_busbw_gbps"].get<double>(), 0);

  // The logs, merged: the launcher's and every rank's lines in time order; --rank filters.
  auto logs = sh(std::string(COHORT_BINARY) + " logs " + run.string(), 30);
  ASSERT_EQ(logs.exit_code, 0) << logs.output;
  std::string prev;
  bool launcher = false, ranks[3] = {false, false, false};
  for (const auto& line : lines_of(logs.output)) {
    if (line.size() < 23 || line[4] != '-' || line[10] != 'T') continue;
    EXPECT_LE(prev, line.substr(0, 23)) << line;
    prev = line.substr(0, 23);
    launcher |= line.find(" [-] ") != std::string::npos;
    for (int k = 0; k < 3; ++k)
      ranks[k] |= line.find("[r" + std::to_string(k)) != std::string::npos;
  }
  EXPECT_TRUE(launcher && ranks[0] && ranks[1] && ranks[2]) << logs.output;
  auto one = sh(std::string(COHORT_BINARY) + " logs " + run.string() + " --rank 1", 30);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_NE(one.output.find("injecting fault: slow"), std::string::npos) << one.output;
  EXPECT_NE(one.output.find("[r1 e0 s"), std::string::npos) << one.output;
  EXPECT_EQ(one.output.find("[r0"), std::string::npos) << one.output;
  EXPECT_EQ(one.output.find(" [-] "), std::string::npos) << one.output;
  // Not a run directory: still a cohort serve job id, with its own error.
  auto serve = sh(std::string(COHORT_BINARY) + " logs " + (dir / "nothing").string(), 30);
  EXPECT_EQ(serve.exit_code, 2) << serve.output;
  EXPECT_NE(serve.output.find("expected a job id"), std::string::npos) << serve.output;
  fs::remove_all(dir);
}

TEST(Diagnose, ACleanRunNamesNoStraggler) {
  auto dir = fresh_dir("clean");
  cohort::e2e::Result r;
  auto run = run_job(dir, "", 3, &r);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(events_named(run, "straggler").empty()) << slurp(run / "events.jsonl");
  auto js = sh(std::string(COHORT_BINARY) + " diagnose --json " + run.string(), 30);
  ASSERT_EQ(js.exit_code, 0) << js.output;
  auto d = json::parse(js.output);
  EXPECT_TRUE(d["stragglers"].empty()) << d.dump(2);
  EXPECT_FALSE(d["recommendations"].empty());
  EXPECT_EQ(d["status"], "completed");
  fs::remove_all(dir);
}

TEST(Diagnose, AHungRunIsDiagnosedWithItsHangReport) {
  auto dir = fresh_dir("hang");
  cohort::e2e::Result r;
  auto run =
      run_job(dir, "faults: [{kind: hang, rank: 1, at_step: 5}]\ncomm: {timeout_s: 2}\n", 2, &r);
  ASSERT_EQ(r.exit_code, 1) << r.output;
  ASSERT_TRUE(fs::exists(run / "hang-report.txt"));
  auto text = sh(std::string(COHORT_BINARY) + " diagnose " + run.string(), 30);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("the run hung: rank 1 never entered allreduce #"), std::string::npos)
      << text.output;
  auto d = json::parse(slurp(run / "diagnosis.json"));
  EXPECT_EQ(d["status"], "failed");
  EXPECT_NE(d["hang"]["headline"].get<std::string>().find("rank 1 never entered"),
            std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
