// The timeline end to end: a job with trace: {enabled: true} whose two workers' clocks disagree
// by 0.3 s, merged by `cohort trace merge` onto one clock.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "shell.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using cohort::e2e::sh;

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

// End time of every collective span of one rank's events, by name ("allreduce #7").
std::map<std::string, int64_t> collective_ends(const json& events, int pid) {
  std::map<std::string, int64_t> out;
  for (const auto& e : events) {
    if (e.value("cat", "") == "comm" && e.value("pid", -1) == pid) {
      out[e["name"]] = e["ts"].get<int64_t>() + e["dur"].get<int64_t>();
    }
  }
  return out;
}

// Median over the collectives both ranks ran of |end on rank 1 - end on rank 0|, in us.
int64_t median_misalignment(const std::map<std::string, int64_t>& a,
                            const std::map<std::string, int64_t>& b) {
  std::vector<int64_t> d;
  for (const auto& [name, end] : a) {
    if (auto it = b.find(name); it != b.end()) d.push_back(std::abs(it->second - end));
  }
  if (d.empty()) return -1;
  std::sort(d.begin(), d.end());
  return d[d.size() / 2];
}

TEST(Trace, MergedTimelineHasEveryRankOnOneClock) {
  auto dir = fs::temp_directory_path() / ("cohort-trace-e2e-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "job.yaml")
      << "name: traced\nworkers: 2\nmodel: {name: mlp}\n"
         "data: {name: synthetic, samples: 2048, shape: [1, 8, 8], classes: 4}\n"
         "train: {max_steps: 20, batch_size: 16}\ncheckpoint: {every_steps: 10}\n"
         "trace: {enabled: true}\n";
  const std::string cohort = COHORT_BINARY;
  const auto token = (dir / "token").string();
  const int port = 20000 + (::getpid() + 7919) % 20000;
  // Workers started separately so that each gets a clock of its own: rank 1's is 0.3 s ahead.
  auto worker = [&](int rank, long skew_us) {
    return "COHORT_CLOCK_SKEW_US=" + std::to_string(skew_us) + " " + cohort +
           " worker --join 127.0.0.1:" + std::to_string(port) + " --rank " + std::to_string(rank) +
           " --token-file " + token;
  };
  std::string cmd = "sh -c '" + cohort + " run " + (dir / "job.yaml").string() + " --run-dir " +
                    (dir / "run").string() + " --external-workers --port " + std::to_string(port) +
                    " --token-file " + token + " & while [ ! -s " + token +
                    " ]; do sleep 0.1; done; " + worker(0, 0) + " & " + worker(1, 300000) +
                    "; wait'";
  auto r = sh(cmd, 180);
  ASSERT_EQ(r.exit_code, 0) << r.output;

  const fs::path run = dir / "run";
  json raw0 = read_json(run / "trace" / "rank-0.json");
  json raw1 = read_json(run / "trace" / "rank-1.json");
  const int64_t offset = raw1["otherData"]["clock_offset_us"].get<int64_t>();
  EXPECT_NEAR(static_cast<double>(offset), -300000.0, 20000.0);
  // Before merging, rank 1's collectives end 0.3 s "later" than the same collectives on rank 0.
  const int64_t before = median_misalignment(collective_ends(raw0["traceEvents"], 0),
                                             collective_ends(raw1["traceEvents"], 1));
  EXPECT_GT(before, 250000);

  auto m = sh(cohort + " trace merge " + run.string(), 60);
  ASSERT_EQ(m.exit_code, 0) << m.output;
  EXPECT_NE(m.output.find("merged 2 ranks"), std::string::npos) << m.output;
  json merged = read_json(run / "trace.json");
  const json& events = merged["traceEvents"];
  const int64_t after = median_misalignment(collective_ends(events, 0), collective_ends(events, 1));
  ASSERT_GE(after, 0);
  EXPECT_LT(after, 20000) << "collectives end within 20 ms of each other on one clock";

  // Every rank has its training phases, its buckets and its collectives with their breakdown.
  for (int pid = 0; pid < 2; ++pid) {
    std::set<std::string> names;
    for (const auto& e : events) {
      if (e.value("pid", -1) == pid) names.insert(e.value("name", ""));
    }
    for (const char* n : {"data", "forward", "backward", "optimizer", "evaluate", "process_name",
                          "bucket 0 ready", "allreduce #2"}) {
      EXPECT_TRUE(names.count(n)) << "rank " << pid << " has no '" << n << "' event";
    }
    if (pid == 0) {
      EXPECT_TRUE(names.count("checkpoint"));
    }
  }
  for (const auto& e : events) {
    if (e.value("cat", "") != "comm") continue;
    for (const char* k : {"algorithm", "bytes", "peers", "wait_ms", "reduce_ms", "transfer_ms"}) {
      EXPECT_TRUE(e["args"].contains(k)) << e.dump();
    }
    break;
  }
  fs::remove_all(dir);
}

}  // namespace
