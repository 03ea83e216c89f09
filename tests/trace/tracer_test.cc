// The timeline: a rank's Chrome trace file, clock offsets measured over real communicators, and
// merging ranks onto one clock.
#include "cohort/trace/tracer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "../comm/world.h"
#include "cohort/base/error.h"
#include "cohort/base/file.h"

namespace cohort::trace {
namespace {

namespace fs = std::filesystem;
using comm::Phase;
using nlohmann::json;

fs::path fresh_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("cohort-trace-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d / "trace");
  return d;
}

json events_named(const json& trace, const std::string& name) {
  json out = json::array();
  for (const auto& e : trace["traceEvents"]) {
    if (e.value("name", "") == name) out.push_back(e);
  }
  return out;
}

TEST(Tracer, WritesPhasesCollectivesAndBucketsAsChromeTraceJson) {
  auto dir = fresh_dir("tracer");
  comm::testing::World world(2);
  world.run([&](int r, comm::Communicator& c) {
    {
      Tracer t({.path = (dir / "trace" / ("rank-" + std::to_string(r) + ".json")).string(),
                .rank = r,
                .clock_offset_us = r == 1 ? 250 : 0});
      c.flight_recorder().set_observer(&t);
      std::vector<float> a(5000, 1.0f);
      for (int step = 1; step <= 3; ++step) {
        t.phase(step, Phase::Forward);
        t.phase(step, Phase::Backward);
        t.instant("bucket 0 ready", a.size() * 4);
        c.allreduce(Buffer{DType::F32, a.data(), a.size()}, {.algorithm = comm::Algorithm::Ring})
            ->wait();
        t.phase(step, Phase::Optimizer);
      }
      c.flight_recorder().set_observer(nullptr);
    }
  });
  for (int r = 0; r < 2; ++r) {
    json j = json::parse(read_file(dir / "trace" / ("rank-" + std::to_string(r) + ".json")));
    EXPECT_EQ(j["otherData"]["rank"], r);
    EXPECT_EQ(j["otherData"]["clock_offset_us"], r == 1 ? 250 : 0);
    auto fwd = events_named(j, "forward");
    ASSERT_EQ(fwd.size(), 3u);
    EXPECT_EQ(fwd[0]["ph"], "X");
    EXPECT_EQ(fwd[0]["pid"], r);
    EXPECT_EQ(fwd[0]["args"]["step"], 1);
    EXPECT_EQ(events_named(j, "optimizer").size(), 3u);  // the last one closed by the destructor
    auto buckets = events_named(j, "bucket 0 ready");
    ASSERT_EQ(buckets.size(), 3u);
    EXPECT_EQ(buckets[0]["ph"], "i");
    EXPECT_EQ(buckets[0]["args"]["bytes"], 20000);
    auto ar = events_named(j, "allreduce #2");
    ASSERT_EQ(ar.size(), 1u);
    EXPECT_EQ(ar[0]["tid"], 1);
    const json& args = ar[0]["args"];
    EXPECT_EQ(args["algorithm"], "ring");
    EXPECT_EQ(args["bytes"], 20000);
    EXPECT_EQ(args["peers"], r == 0 ? "1" : "0");
    EXPECT_GT(args["sent_bytes"].get<int>(), 0);
    const double parts = args["wait_ms"].get<double>() + args["reduce_ms"].get<double>() +
                         args["transfer_ms"].get<double>();
    EXPECT_NEAR(parts, ar[0]["dur"].get<double>() / 1e3, 0.01);
    EXPECT_EQ(events_named(j, "process_name")[0]["args"]["name"], "rank " + std::to_string(r));
  }

  // Merged: one process per rank, rank 1 shifted by its offset.
  EXPECT_EQ(merge_traces(dir.string()), 2);
  json merged = json::parse(read_file(dir / "trace.json"));
  json rank1 = json::parse(read_file(dir / "trace" / "rank-1.json"));
  auto before = events_named(rank1, "allreduce #3")[0]["ts"].get<int64_t>();
  int64_t after = 0;
  std::set<int> pids;
  for (const auto& e : merged["traceEvents"]) {
    pids.insert(e["pid"].get<int>());
    if (e.value("name", "") == "allreduce #3" && e["pid"] == 1) after = e["ts"].get<int64_t>();
  }
  EXPECT_EQ(after, before + 250);
  EXPECT_EQ(pids, (std::set<int>{0, 1}));
  EXPECT_EQ(merged["otherData"]["clock_offsets_us"]["1"], 250);
  fs::remove_all(dir);
}

TEST(Tracer, TheBufferIsBoundedAndDropsAreCounted) {
  auto dir = fresh_dir("bounded");
  const auto path = (dir / "trace" / "rank-0.json").string();
  uint64_t dropped = 0;
  {
    Tracer t({.path = path, .rank = 0, .max_pending = 10});
    for (int i = 0; i < 5000; ++i) t.instant("tick", 1);  // far faster than 10 per 200 ms
    dropped = t.dropped();
  }
  EXPECT_GT(dropped, 0u);
  json j = json::parse(read_file(path));
  const size_t ticks = events_named(j, "tick").size();
  EXPECT_EQ(ticks + dropped, 5000u);
  EXPECT_EQ(events_named(j, "cohort_dropped_events")[0]["args"]["count"], dropped);
  fs::remove_all(dir);
}

// A collective that failed while still queued (an abort, routine when a membership changes) never
// started: it is an instant when it ended, not a span from the clock's zero to then (which zooms
// a trace viewer out to decades).
TEST(Tracer, ACollectiveThatNeverStartedIsAnInstantWhenItEnded) {
  auto dir = fresh_dir("never-started");
  const auto path = (dir / "trace" / "rank-0.json").string();
  {
    Tracer t({.path = path, .rank = 0});
    t.on_collective({.seq = 7,
                     .state = comm::CollectiveState::Failed,
                     .queued_us = 5'000'000,
                     .finished_us = 9'000'000});
  }
  const json j = json::parse(read_file(path));
  const json events = events_named(j, "allreduce #7 (never started)");
  ASSERT_EQ(events.size(), 1u) << j.dump(2);
  EXPECT_EQ(events[0]["ph"], "i");
  EXPECT_EQ(events[0]["ts"], 9'000'000);
  EXPECT_EQ(events[0]["args"]["state"], "failed");
  for (const auto& e : j["traceEvents"]) {
    EXPECT_FALSE(e.value("ph", "") == "X" && e.value("ts", int64_t{-1}) == 0) << e.dump();
  }
  fs::remove_all(dir);
}

TEST(Tracer, MergeReadsTheFileOfARankThatDiedMidRun) {
  auto dir = fresh_dir("partial");
  std::ofstream(dir / "trace" / "rank-0.json")
      << "{\"otherData\": {\"rank\": 0, \"clock_offset_us\": 0},\n\"traceEvents\": [\n"
         "{\"ph\":\"X\",\"pid\":0,\"tid\":0,\"ts\":100,\"dur\":5,\"name\":\"forward\"},\n";
  EXPECT_EQ(merge_traces(dir.string()), 1);
  json merged = json::parse(read_file(dir / "trace.json"));
  EXPECT_EQ(events_named(merged, "forward").size(), 1u);
  std::ofstream(dir / "trace" / "rank-1.json") << "garbage";
  EXPECT_THROW(merge_traces(dir.string()), Error);
  EXPECT_THROW(merge_traces((dir / "nothing").string()), Error);
  fs::remove_all(dir);
}

TEST(ClockOffset, RanksOnOneMachineAgreeWithinTheRoundTrip) {
  comm::testing::World world(3);
  std::vector<int64_t> offsets(3, -1);
  world.run([&](int r, comm::Communicator& c) {
    offsets[static_cast<size_t>(r)] = measure_clock_offset(c);
  });
  EXPECT_EQ(offsets[0], 0);
  // Threads share one clock: the measured offset is the measurement's error, bounded by half
  // the best round trip (well under 5 ms even on a loaded machine).
  EXPECT_LT(std::abs(offsets[1]), 5000);
  EXPECT_LT(std::abs(offsets[2]), 5000);
}

}  // namespace
}  // namespace cohort::trace
