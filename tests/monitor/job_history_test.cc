// JobHistory on a real SQLite file: what is written survives reopening, and writers on many
// threads (and two connections, as a restarted server has) lose nothing.
#include "cohort/monitor/job_history.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <thread>

#include "cohort/base/error.h"

namespace cohort::monitor {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path fresh_db(const std::string& name) {
  auto d =
      fs::temp_directory_path() / ("cohort-history-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d / "history.db";
}

JobRecord queued(const std::string& name) {
  return {.name = name,
          .state = "queued",
          .workers = 2,
          .source = name + ".yaml",
          .config_yaml = "name: " + name + "\n",
          .submitted = 100.5};
}

TEST(JobHistory, WhatIsWrittenSurvivesReopening) {
  auto path = fresh_db("reopen");
  int64_t id = 0;
  {
    JobHistory h(path.string());
    id = h.add(queued("a"));
    JobRecord r = *h.get(id);
    r.state = "completed";
    r.started = 101;
    r.finished = 110.25;
    r.summary = {{"status", "completed"}, {"test_accuracy", 0.875}};
    h.update(r);
    h.add_metric(id, {{"step", 10}, {"loss", 1.5}});
    h.add_metric(id, {{"step", 20}, {"loss", 1.0}});
    h.add_event(id, {{"time", 1.0}, {"event", "job_started"}});
    h.add_event(id, {{"time", 2.0}, {"event", "job_completed"}});
  }
  JobHistory h(path.string());
  auto r = h.get(id);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->name, "a");
  EXPECT_EQ(r->state, "completed");
  EXPECT_EQ(r->workers, 2);
  EXPECT_EQ(r->config_yaml, "name: a\n");
  EXPECT_DOUBLE_EQ(r->finished, 110.25);
  EXPECT_EQ(r->summary["test_accuracy"], 0.875);
  EXPECT_EQ(h.metrics(id).size(), 2u);
  EXPECT_EQ(h.metrics(id, 10).size(), 1u);
  json events = h.events(id);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1]["event"], "job_completed");
  EXPECT_FALSE(h.get(id + 1));
  fs::remove_all(path.parent_path());
}

TEST(JobHistory, ConcurrentAddsFromThreadsAndTwoConnectionsAreAllKept) {
  auto path = fresh_db("concurrent");
  JobHistory first(path.string()), second(path.string());
  constexpr int kThreads = 8, kPerThread = 25;
  std::vector<std::vector<int64_t>> ids(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      JobHistory& h = t % 2 ? second : first;
      for (int i = 0; i < kPerThread; ++i) {
        int64_t id = h.add(queued("job-" + std::to_string(t * kPerThread + i)));
        h.add_event(id, {{"time", 0.0}, {"event", "job_submitted"}});
        ids[t].push_back(id);
      }
    });
  }
  for (auto& th : threads) th.join();
  std::set<int64_t> all;
  for (const auto& v : ids) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), static_cast<size_t>(kThreads * kPerThread));
  auto listed = first.list();
  EXPECT_EQ(listed.size(), static_cast<size_t>(kThreads * kPerThread));
  EXPECT_GT(listed.front().id, listed.back().id);  // newest first
  EXPECT_EQ(second.with_state("queued").size(), static_cast<size_t>(kThreads * kPerThread));
  for (int64_t id : all) EXPECT_EQ(first.events(id).size(), 1u) << id;
  fs::remove_all(path.parent_path());
}

TEST(JobHistory, AnUnopenableDatabaseNamesThePath) {
  try {
    JobHistory h("/nonexistent-dir/history.db");
    FAIL() << "opened";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/history.db"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace cohort::monitor
