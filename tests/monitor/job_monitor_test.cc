// JobMonitor's views and Prometheus text, StatusPoller reading a real store.
#include "cohort/monitor/job_monitor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "cohort/base/clock.h"
#include "cohort/base/histogram.h"
#include "cohort/elastic/job_protocol.h"
#include "cohort/monitor/status_poller.h"
#include "cohort/store/memory_store.h"

namespace cohort::monitor {
namespace {

using nlohmann::json;

JobInfo info(int world = 2) {
  return {.name = "unit", .world_size = world, .config_yaml = "name: unit\n", .run_dir = "/tmp/x"};
}

json record(int64_t step, double loss) {
  return {{"step", step},          {"total_steps", 100}, {"epoch", 0}, {"epochs", 1},
          {"loss", loss},          {"accuracy", 0.5},    {"lr", 0.1},  {"samples_per_sec", 1000.0},
          {"steps_per_sec", 10.0}, {"time", 1.0}};
}

json status(int64_t step, uint64_t bytes, double wait) {
  LatencyHistogram h;
  h.observe(wait);
  json counts = json::array();
  for (size_t i = 0; i < LatencyHistogram::kBuckets; ++i) counts.push_back(h.bucket(i));
  return {{"state", "training"}, {"step", step},
          {"step_time", 0.01},   {"comm_share", 0.25},
          {"bytes_sent", bytes}, {"host", "h"},
          {"pid", 42},           {"comm_wait_hist", {{"counts", counts}, {"sum", h.sum()}}}};
}

TEST(JobMonitor, JobViewFollowsTheProgressRecordsAndComputesTheEta) {
  JobMonitor m(info());
  EXPECT_EQ(m.job()["state"], "starting");
  EXPECT_TRUE(m.job()["eta_seconds"].is_null());
  m.add_metric(record(10, 2.0));
  m.add_metric(record(20, 1.5));
  json j = m.job();
  EXPECT_EQ(j["state"], "running");
  EXPECT_EQ(j["step"], 20);
  EXPECT_EQ(j["total_steps"], 100);
  EXPECT_DOUBLE_EQ(j["loss"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(j["progress"].get<double>(), 0.2);
  EXPECT_DOUBLE_EQ(j["eta_seconds"].get<double>(), 8.0);  // 80 steps at 10 steps/s
  m.finish("completed", {{"status", "completed"}, {"test_accuracy", 0.8}});
  j = m.job();
  EXPECT_EQ(j["state"], "completed");
  EXPECT_DOUBLE_EQ(j["eta_seconds"].get<double>(), 0.0);
  EXPECT_EQ(j["summary"]["test_accuracy"], 0.8);
}

TEST(JobMonitor, MetricsSinceReturnsOnlyLaterSteps) {
  JobMonitor m(info());
  for (int s = 10; s <= 50; s += 10) m.add_metric(record(s, 1.0));
  EXPECT_EQ(m.metrics_since(-1).size(), 5u);
  json later = m.metrics_since(30);
  ASSERT_EQ(later.size(), 2u);
  EXPECT_EQ(later[0]["step"], 40);
  EXPECT_EQ(later[1]["step"], 50);
  EXPECT_TRUE(m.metrics_since(50).empty());
}

TEST(JobMonitor, WorkerRowsMergeJoinStatusHeartbeatAndProcessExit) {
  JobMonitor m(info());
  EXPECT_EQ(m.workers()[0]["state"], "waiting");
  EXPECT_TRUE(m.update_worker(0, json{{"host", "a"}, {"pid", 7}}, std::nullopt, std::nullopt));
  EXPECT_FALSE(m.update_worker(0, json{{"host", "a"}, {"pid", 7}}, std::nullopt, std::nullopt));
  json w = m.workers()[0];
  EXPECT_EQ(w["state"], "joined");
  EXPECT_EQ(w["host"], "a");
  EXPECT_TRUE(w["last_heartbeat"].is_null());
  const double before = wall_seconds();
  m.update_worker(0, json{{"host", "a"}, {"pid", 7}}, status(5, 100, 0.001), "41");
  w = m.workers()[0];
  EXPECT_EQ(w["state"], "training");
  EXPECT_EQ(w["step"], 5);
  EXPECT_EQ(w["heartbeats"], 41);
  const double seen = w["last_heartbeat"].get<double>();
  EXPECT_GE(seen, before);
  EXPECT_LE(seen, wall_seconds());
  EXPECT_GE(w["heartbeat_age_seconds"].get<double>(), 0);
  // The same count again is no news; the next one is.
  EXPECT_FALSE(m.update_worker(0, json{{"host", "a"}, {"pid", 7}}, status(5, 100, 0.001), "41"));
  EXPECT_EQ(m.workers()[0]["last_heartbeat"].get<double>(), seen);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(m.update_worker(0, json{{"host", "a"}, {"pid", 7}}, status(5, 100, 0.001), "42"));
  EXPECT_GT(m.workers()[0]["last_heartbeat"].get<double>(), seen);
  m.worker_exited(1, "killed by SIGKILL", false);
  EXPECT_EQ(m.workers()[1]["state"], "failed");
  EXPECT_EQ(m.workers()[1]["exit"], "killed by SIGKILL");
}

TEST(JobMonitor, DeltaCarriesOnlyWhatIsNewAndWaitersWakeOnChange) {
  JobMonitor m(info());
  JobMonitor::Cursor c;
  m.add_metric(record(10, 1.0));
  m.add_event({{"time", 1.0}, {"event", "job_started"}});
  json d = m.delta(c);
  EXPECT_EQ(d["metrics"].size(), 1u);
  EXPECT_EQ(d["events"].size(), 1u);
  EXPECT_EQ(d["workers"].size(), 2u);
  EXPECT_EQ(m.wait_for_change(c.version, std::chrono::milliseconds(10)), c.version);
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    m.add_metric(record(20, 0.9));
  });
  EXPECT_NE(m.wait_for_change(c.version, std::chrono::seconds(10)), c.version);
  t.join();
  d = m.delta(c);
  ASSERT_EQ(d["metrics"].size(), 1u);
  EXPECT_EQ(d["metrics"][0]["step"], 20);
  EXPECT_TRUE(d["events"].empty());
}

// Parses the exposition text into "name{labels}" -> value, checking that every sample belongs to
// a family announced by # TYPE.
std::map<std::string, double> parse_exposition(const std::string& text) {
  std::map<std::string, double> out;
  std::set<std::string> families;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream f(line.substr(7));
      std::string name;
      f >> name;
      families.insert(name);
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    auto sp = line.rfind(' ');
    std::string key = line.substr(0, sp);
    std::string name = key.substr(0, key.find('{'));
    bool known = families.count(name) > 0;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      std::string s = suffix;
      if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
        known = known || families.count(name.substr(0, name.size() - s.size())) > 0;
      }
    }
    EXPECT_TRUE(known) << "sample without a # TYPE: " << line;
    out[key] = std::stod(line.substr(sp + 1));
  }
  return out;
}

// A diverged training's loss reaches the monitor as null (how JSON writes NaN): the job view and
// the Prometheus text say NaN instead of failing on every request.
TEST(JobMonitor, ALossThatWasNotFiniteIsShownAsNaN) {
  JobMonitor m(info());
  m.add_metric(json::parse(record(10, NAN).dump()));
  const json j = m.job();
  EXPECT_TRUE(j["loss"].is_null() || std::isnan(j["loss"].get<double>())) << j.dump();
  EXPECT_TRUE(std::isnan(parse_exposition(m.prometheus())["cohort_loss"]));
}

TEST(JobMonitor, PrometheusTextHasStepLossBytesHistogramAndWorkerStates) {
  JobMonitor m(info());
  m.add_metric(record(30, 0.75));
  m.update_worker(0, std::nullopt, status(30, 1000, 0.0003), std::nullopt);
  m.update_worker(1, std::nullopt, status(29, 500, 3.0), std::nullopt);
  auto v = parse_exposition(m.prometheus());
  EXPECT_EQ(v["cohort_step"], 30);
  EXPECT_EQ(v["cohort_loss"], 0.75);
  EXPECT_EQ(v["cohort_samples_per_second"], 1000);
  EXPECT_EQ(v["cohort_bytes_sent_total"], 1500);
  EXPECT_EQ(v["cohort_worker_step{rank=\"1\"}"], 29);
  EXPECT_EQ(v["cohort_worker_state{rank=\"0\",state=\"training\"}"], 1);
  EXPECT_EQ(v["cohort_worker_state{rank=\"0\",state=\"failed\"}"], 0);
  // Cumulative buckets: 0.3 ms falls under 0.5 ms, 3 s under 5 s; +Inf counts both.
  EXPECT_EQ(v["cohort_collective_wait_seconds_bucket{le=\"0.00025\"}"], 0);
  EXPECT_EQ(v["cohort_collective_wait_seconds_bucket{le=\"0.0005\"}"], 1);
  EXPECT_EQ(v["cohort_collective_wait_seconds_bucket{le=\"2.5\"}"], 1);
  EXPECT_EQ(v["cohort_collective_wait_seconds_bucket{le=\"5\"}"], 2);
  EXPECT_EQ(v["cohort_collective_wait_seconds_bucket{le=\"+Inf\"}"], 2);
  EXPECT_EQ(v["cohort_collective_wait_seconds_count"], 2);
  EXPECT_NEAR(v["cohort_collective_wait_seconds_sum"], 3.0003, 1e-9);
}

json histogram(std::initializer_list<double> seconds) {
  LatencyHistogram h;
  for (double x : seconds) h.observe(x);
  json counts = json::array();
  for (size_t i = 0; i < LatencyHistogram::kBuckets; ++i) counts.push_back(h.bucket(i));
  return {{"counts", counts}, {"sum", h.sum()}};
}

TEST(JobMonitor, PrometheusCollectiveLatencyIsAHistogramPerOperationOverAllWorkers) {
  JobMonitor m(info());
  json s0 = status(10, 0, 0.001), s1 = status(10, 0, 0.001);
  s0["collective_latency"] = {{"allreduce", histogram({0.0002, 0.003})},
                              {"broadcast", histogram({0.02})}};
  s1["collective_latency"] = {{"allreduce", histogram({0.004})},
                              {"allgather", {{"counts", "not a list"}}}};  // ignored
  m.update_worker(0, std::nullopt, s0, std::nullopt);
  m.update_worker(1, std::nullopt, s1, std::nullopt);
  auto v = parse_exposition(m.prometheus());
  const std::string ar = "cohort_collective_latency_seconds";
  EXPECT_EQ(v[ar + "_bucket{op=\"allreduce\",le=\"0.00025\"}"], 1);
  EXPECT_EQ(v[ar + "_bucket{op=\"allreduce\",le=\"0.0025\"}"], 1);
  EXPECT_EQ(v[ar + "_bucket{op=\"allreduce\",le=\"0.005\"}"], 3);
  EXPECT_EQ(v[ar + "_bucket{op=\"allreduce\",le=\"+Inf\"}"], 3);
  EXPECT_EQ(v[ar + "_count{op=\"allreduce\"}"], 3);
  EXPECT_NEAR(v[ar + "_sum{op=\"allreduce\"}"], 0.0072, 1e-12);
  EXPECT_EQ(v[ar + "_count{op=\"broadcast\"}"], 1);
  EXPECT_EQ(v[ar + "_count{op=\"allgather\"}"], 0);
}

TEST(JobMonitor, AReplacementWorkerGetsARowThatSaysWhomItReplaces) {
  JobMonitor m(info(2));
  m.worker_exited(1, "killed by signal 9 (SIGKILL)", false);
  m.add_worker(2, /*replaces=*/1);
  EXPECT_EQ(m.ranks(), 3);
  json e{{"time", 1.0}, {"event", "membership_changed"}, {"epoch", 1}, {"members", {0}}};
  m.add_event(e);
  EXPECT_EQ(m.job()["members"], 1);
  m.update_worker(2, std::nullopt, status(5, 10, 0.001), std::nullopt);
  json w = m.workers();
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[1]["state"], "failed");
  EXPECT_FALSE(w[1].contains("replaces"));
  EXPECT_EQ(w[2]["rank"], 2);
  EXPECT_EQ(w[2]["replaces"], 1);
  EXPECT_EQ(w[2]["state"], "training");
  EXPECT_EQ(w[2]["step"], 5);
  auto v = parse_exposition(m.prometheus());
  EXPECT_EQ(v["cohort_worker_state{rank=\"2\",state=\"training\"}"], 1);
}

TEST(JobMonitor, PrometheusLabelValuesAreEscaped) {
  JobInfo i = info(1);
  i.name = "a\"b\\c";
  JobMonitor m(i);
  EXPECT_NE(m.prometheus().find("cohort_job_info{name=\"a\\\"b\\\\c\",state=\"starting\"} 1"),
            std::string::npos)
      << m.prometheus();
}

TEST(StatusPoller, ReadsJoinedStatusAndHeartbeatKeysFromTheStore) {
  JobMonitor m(info());
  auto store = std::make_unique<store::MemoryStore>();
  store::Store& s = *store;
  s.set(elastic::keys::joined(0), store::to_bytes(json{{"host", "n0"}, {"pid", 11}}.dump()));
  s.set(elastic::keys::status(1), store::to_bytes(status(3, 9, 0.01).dump()));
  s.add("job/heartbeat/1", 3);  // the counter a worker bumps
  StatusPoller p(std::move(store), m, 2);
  p.poll_once();
  json w = m.workers();
  EXPECT_EQ(w[0]["state"], "joined");
  EXPECT_EQ(w[0]["host"], "n0");
  EXPECT_EQ(w[1]["state"], "training");
  EXPECT_EQ(w[1]["step"], 3);
  EXPECT_EQ(w[1]["heartbeats"], 3);
  EXPECT_TRUE(w[1]["last_heartbeat"].is_number());
  EXPECT_TRUE(w[0]["last_heartbeat"].is_null());

  // A replacement worker (rank 2 of a 2-worker job) is followed once the launcher adds it.
  s.set(elastic::keys::status(2), store::to_bytes(status(7, 9, 0.01).dump()));
  p.poll_once();
  EXPECT_EQ(m.workers().size(), 2u);
  m.add_worker(2, 0);
  p.poll_once();
  ASSERT_EQ(m.workers().size(), 3u);
  EXPECT_EQ(m.workers()[2]["step"], 7);
}

}  // namespace
}  // namespace cohort::monitor
