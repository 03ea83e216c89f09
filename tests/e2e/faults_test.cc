// Faults injected through the job file (faults:), and what the job and its hang report make of
// them: `cohort run` with real worker processes on a small synthetic data set.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

#include "files.h"
#include "shell.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using cohort::e2e::sh;
using cohort::e2e::slurp;

fs::path fresh_dir(const std::string& name) {
  return cohort::e2e::fresh_dir("faults", name);
}

json read_json(const fs::path& p) {
  return json::parse(slurp(p));
}

// A small, fast job; `extra` adds keys (faults:, debug:, comm:) at the top level.
fs::path write_job(const fs::path& dir, int workers, const std::string& extra, int max_steps = 30,
                   double timeout_s = 4) {
  auto path = dir / "job.yaml";
  std::ofstream(path) << "name: faults\n"
                      << "workers: " << workers << "\n"
                      << "model: {name: mlp}\n"
                      << "data: {name: synthetic, samples: 4096, shape: [1, 8, 8], classes: 4}\n"
                      << "train: {epochs: 1000, max_steps: " << max_steps
                      << ", batch_size: 16, log_every_steps: 5}\n"
                      << "comm: {timeout_s: " << timeout_s << "}\n"
                      << "checkpoint: {every_steps: 0}\n"
                      << extra;
  return path;
}

std::string run_cmd(const fs::path& dir) {
  return std::string(COHORT_BINARY) + " run " + (dir / "job.yaml").string() + " --run-dir " +
         (dir / "run").string();
}

TEST(Faults, KillEndsTheWorkerWithSigkillAndTheJobFails) {
  auto dir = fresh_dir("kill");
  write_job(dir, 2, "faults: [{kind: kill, rank: 1, at_step: 5}]\n");
  auto r = sh(run_cmd(dir), 120);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  auto s = read_json(dir / "run" / "summary.json");
  EXPECT_EQ(s["status"], "failed");
  const std::string events = slurp(dir / "run" / "events.jsonl");
  EXPECT_NE(events.find(R"x("rank":1,"status":"killed by signal 9 (SIGKILL)")x"), std::string::npos)
      << events;
  EXPECT_NE(slurp(dir / "run" / "logs" / "rank-1.log").find("injecting fault: kill after 5 steps"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "run" / "hang-report.txt"));  // a crash is not a hang
  fs::remove_all(dir);
}

TEST(Faults, HangIsReportedNamingTheRankWhenTheCollectiveTimesOut) {
  auto dir = fresh_dir("hang");
  write_job(dir, 2, "faults: [{kind: hang, rank: 1, at_step: 5}]\n", 30, /*timeout_s=*/3);
  const auto start = std::chrono::steady_clock::now();
  auto r = sh(run_cmd(dir), 120);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_LT(took, 60) << r.output;
  const std::string report = slurp(dir / "run" / "hang-report.txt");
  EXPECT_NE(report.find("a collective timed out"), std::string::npos) << report;
  EXPECT_NE(report.find("rank 1 never entered allreduce #"), std::string::npos) << report;
  EXPECT_NE(report.find("(bucket 0, "), std::string::npos) << report;
  EXPECT_NE(report.find("rank 0 has waited"), std::string::npos) << report;
  EXPECT_NE(report.find("rank 1 last finished #"), std::string::npos) << report;
  EXPECT_NE(report.find("is in data of step 6"), std::string::npos) << report;
  EXPECT_NE(r.output.find("diagnosis: rank 1 never entered allreduce #"), std::string::npos)
      << r.output;
  const std::string events = slurp(dir / "run" / "events.jsonl");
  EXPECT_NE(events.find(R"("event":"hang_report")"), std::string::npos) << events;
  EXPECT_NE(events.find(R"("ranks":[1])"), std::string::npos) << events;
  fs::remove_all(dir);
}

TEST(Faults, NoProgressProducesAReportAndATemporaryHangRecovers) {
  // Rank 1 stands still for 8 s; the launcher reports after 2 s without progress; the
  // collective's own deadline (30 s) is not reached and the job completes.
  auto dir = fresh_dir("stall");
  write_job(dir, 2,
            "faults: [{kind: hang, rank: 1, at_step: 5, seconds: 8}]\n"
            "debug: {hang_timeout_s: 2}\n",
            20, /*timeout_s=*/30);
  auto r = sh(run_cmd(dir), 120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const std::string report = slurp(dir / "run" / "hang-report.txt");
  EXPECT_NE(report.find("no rank made progress for 2 s"), std::string::npos) << report;
  EXPECT_NE(report.find("rank 1 never entered allreduce #"), std::string::npos) << report;
  EXPECT_EQ(read_json(dir / "run" / "summary.json")["status"], "completed");
  fs::remove_all(dir);
}

TEST(Faults, AStoppedRankIsNamedAsStopped) {
  // SIGSTOP from outside: the rank cannot answer at all; the launcher sees its process state.
  auto dir = fresh_dir("sigstop");
  write_job(dir, 3,
            "faults: [{kind: slow, rank: 0, seconds: 0.02}, {kind: slow, rank: 1, seconds: 0.02},"
            " {kind: slow, rank: 2, seconds: 0.02}]\n",
            100000, /*timeout_s=*/3);
  cohort::e2e::Result r;
  std::thread job([&] { r = sh(run_cmd(dir), 150); });
  // Wait for rank 2's pid and for training to be under way, then stop rank 2.
  pid_t pid = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  while (std::chrono::steady_clock::now() < deadline) {
    std::istringstream events(slurp(dir / "run" / "events.jsonl"));
    std::string line;
    while (std::getline(events, line)) {
      auto e = json::parse(line, nullptr, false);
      if (!e.is_discarded() && e.value("event", "") == "worker_started" &&
          e.value("rank", -1) == 2) {
        pid = e.value("pid", 0);
      }
    }
    std::ifstream metrics(dir / "run" / "metrics.jsonl");
    int lines = 0;
    while (std::getline(metrics, line)) ++lines;
    if (pid > 0 && lines >= 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGSTOP), 0);
  job.join();
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const std::string report = slurp(dir / "run" / "hang-report.txt");
  EXPECT_NE(report.find("rank 2 did not report (pid " + std::to_string(pid) +
                        " is stopped (SIGSTOP or a debugger)"),
            std::string::npos)
      << report;
  // Both survivors usually wait in the collective rank 2 stopped in. In a ring a rank hears
  // only from its left neighbour, so when the stop lands late in a collective one survivor can
  // finish it and wait in the next: the report then names the other survivor's wait first.
  EXPECT_TRUE(report.find("ranks 0, 1 have waited") != std::string::npos ||
              report.find("rank 0 has waited") != std::string::npos ||
              report.find("rank 1 has waited") != std::string::npos)
      << report;
  EXPECT_EQ(::kill(pid, 0), -1);  // the launcher ended it
  fs::remove_all(dir);
}

TEST(Faults, SlowMakesEveryStepOfThatRankLonger) {
  auto dir = fresh_dir("slow");
  write_job(dir, 2, "faults: [{kind: slow, rank: 1, at_step: 0, seconds: 0.1}]\n", 20);
  auto r = sh(run_cmd(dir), 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto s = read_json(dir / "run" / "summary.json");
  const auto& ranks = s["per_rank"];
  // 20 steps x 0.1 s on rank 1, counted as its compute; rank 0 spends that time waiting for it.
  EXPECT_GE(ranks[1]["compute_seconds"].get<double>(), 2.0) << s.dump(2);
  EXPECT_GE(ranks[0]["comm_seconds"].get<double>(), 1.5) << s.dump(2);
  EXPECT_LT(ranks[0]["compute_seconds"].get<double>(), ranks[1]["compute_seconds"].get<double>())
      << s.dump(2);
  EXPECT_GE(s["train_seconds"].get<double>(), 2.0);
  fs::remove_all(dir);
}

TEST(Faults, DisconnectCutsThePeerConnectionsAndTheJobRecovers) {
  // Both ranks lose their connections; both are still alive, so they meet again at the next
  // membership epoch, roll back to the last snapshot and finish.
  auto dir = fresh_dir("disconnect");
  write_job(dir, 2, "faults: [{kind: disconnect, rank: 1, at_step: 5}]\n");
  auto r = sh(run_cmd(dir), 120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto s = read_json(dir / "run" / "summary.json");
  EXPECT_EQ(s["status"], "completed") << s.dump(2);
  EXPECT_GE(s.value("recoveries", 0), 1) << s.dump(2);
  const std::string log1 = slurp(dir / "run" / "logs" / "rank-1.log");
  EXPECT_NE(log1.find("injecting fault: disconnect after 5 steps"), std::string::npos) << log1;
  EXPECT_EQ(log1.find("injecting fault: disconnect", log1.find("injecting fault: disconnect") + 1),
            std::string::npos)
      << "the fault fired twice\n"
      << log1;
  fs::remove_all(dir);
}

}  // namespace
