// End to end: the web console of a real running job (`cohort run` with 2 worker processes on
// Fashion-MNIST): its JSON API, Prometheus text, event stream, `cohort status`, and the page itself
// in headless Chromium (web/test/console.test.mjs, playwright-core).
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "../cli/cohort_process.h"
#include "files.h"
#include "shell.h"

namespace fs = std::filesystem;
using cohort::testing::CohortProcess;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

fs::path fresh_dir(const std::string& name) {
  return cohort::e2e::fresh_dir("console", name);
}

std::string source(const std::string& rel) {
  return std::string(COHORT_SOURCE_DIR) + "/" + rel;
}

// A 2-worker MLP job with its console on a free port, long enough (30 epochs: 3 took about 10 s,
// less than a headless browser needed to start on a loaded machine) that the test ends it with
// Ctrl-C once it has seen what it needs.
constexpr int kEpochs = 30;
std::unique_ptr<CohortProcess> start_job(const fs::path& run_dir) {
  return std::make_unique<CohortProcess>(std::vector<std::string>{
      "run", source("examples/fashion-mlp.yaml"), "--run-dir", run_dir.string(), "--set",
      "train.epochs=" + std::to_string(kEpochs), "--set", "train.log_every_steps=5", "--set",
      "checkpoint.every_steps=0", "--set", "dashboard.port=0"});
}

// Waits for <run_dir>/console.url and returns the URL in it.
std::string wait_for_url(const fs::path& run_dir, CohortProcess& job) {
  auto deadline = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(run_dir / "console.url");
    std::string url;
    if (in >> url && !url.empty()) return url;
    if (job.wait_for(0ms)) break;
    std::this_thread::sleep_for(50ms);
  }
  ADD_FAILURE() << "no console.url\nstdout:\n" << job.out() << "\nstderr:\n" << job.err();
  return "";
}

uint16_t port_of(const std::string& url) {
  return static_cast<uint16_t>(std::stoi(url.substr(url.rfind(':') + 1)));
}

json get_json(httplib::Client& c, const std::string& path) {
  auto res = c.Get(path);
  if (!res) {
    ADD_FAILURE() << path << ": " << httplib::to_string(res.error());
    return json();
  }
  EXPECT_EQ(res->status, 200) << path << ": " << res->body;
  return json::parse(res->body);
}

// Polls `path` until pred(json) holds (120 s: the machine may be busy).
json poll_until(httplib::Client& c, const std::string& path,
                const std::function<bool(const json&)>& pred, const std::string& what) {
  auto deadline = std::chrono::steady_clock::now() + 120s;
  json j;
  while (std::chrono::steady_clock::now() < deadline) {
    j = get_json(c, path);
    if (j.is_null() || pred(j)) return j;
    std::this_thread::sleep_for(100ms);
  }
  ADD_FAILURE() << "timed out waiting for " << what << "; last " << path << ": " << j.dump(2);
  return j;
}

double sample(const std::string& text, const std::string& key) {
  auto at = text.find("\n" + key + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + key.size() + 2));
}

TEST(Console, ApiStreamPrometheusAndStatusOfARunningTwoWorkerJob) {
  auto root = fresh_dir("api");
  auto run_dir = root / "runs" / "mlp";
  auto job = start_job(run_dir);
  std::string url = wait_for_url(run_dir, *job);
  ASSERT_FALSE(url.empty());
  EXPECT_EQ(url.rfind("http://127.0.0.1:", 0), 0u) << url;  // loopback by default
  httplib::Client c("127.0.0.1", port_of(url));
  c.set_read_timeout(30, 0);

  // Both workers training, with their real pids.
  json workers = poll_until(
      c, "/api/workers",
      [](const json& w) {
        return w.size() == 2 && w[0].value("state", "") == "training" &&
               w[1].value("state", "") == "training" && w[0].value("step", 0) > 0 &&
               w[1].value("step", 0) > 0;
      },
      "both workers training");
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(workers[r]["rank"], r);
    EXPECT_EQ(workers[r]["host"], host);
    pid_t pid = workers[r].value("pid", 0);
    EXPECT_GT(pid, 0);
    EXPECT_EQ(::kill(pid, 0), 0) << "rank " << r << " pid " << pid << " is not alive";
    EXPECT_GT(workers[r]["step_time"].get<double>(), 0);
    double share = workers[r]["comm_share"].get<double>();
    EXPECT_TRUE(share >= 0 && share <= 1) << share;
    EXPECT_GT(workers[r]["bytes_sent"].get<double>(), 0);
  }

  json j = poll_until(
      c, "/api/job", [](const json& j) { return j.value("step", 0) >= 20; }, "20 steps");
  EXPECT_EQ(j["name"], "fashion-mlp");
  EXPECT_EQ(j["state"], "running");
  EXPECT_EQ(j["world_size"], 2);
  EXPECT_EQ(j["joined"], 2);
  EXPECT_EQ(j["total_steps"], kEpochs * 469);  // 60000 / (64 * 2) per epoch, rounded up
  EXPECT_TRUE(j["eta_seconds"].is_number()) << j.dump();
  EXPECT_GT(j["progress"].get<double>(), 0);
  EXPECT_NE(j["config"].get<std::string>().find("dashboard:"), std::string::npos);
  EXPECT_EQ(j["console_url"], url);

  // Metrics: every record, in step order; since=S gives exactly those after S.
  json all = get_json(c, "/api/metrics");
  ASSERT_GE(all.size(), 4u);
  for (size_t i = 1; i < all.size(); ++i) EXPECT_GT(all[i]["step"], all[i - 1]["step"]);
  int64_t since = all[all.size() / 2]["step"];
  json later = get_json(c, "/api/metrics?since=" + std::to_string(since));
  ASSERT_FALSE(later.empty());
  EXPECT_EQ(later[0]["step"].get<int64_t>(), all[all.size() / 2 + 1]["step"].get<int64_t>());
  for (const auto& m : later) {
    EXPECT_GT(m["step"].get<int64_t>(), since);
    for (const char* k : {"loss", "accuracy", "samples_per_sec"}) EXPECT_TRUE(m.contains(k)) << k;
  }

  json events = get_json(c, "/api/events");
  std::map<std::string, int> seen;
  for (const auto& e : events) seen[e.value("event", "")]++;
  EXPECT_EQ(seen["console_started"], 1);
  EXPECT_EQ(seen["job_started"], 1);
  EXPECT_EQ(seen["worker_started"], 2);

  // Prometheus text.
  auto prom = c.Get("/metrics");
  ASSERT_TRUE(prom);
  const std::string text = "\n" + prom->body;
  EXPECT_GT(sample(text, "cohort_step"), 0) << prom->body;
  EXPECT_GE(sample(text, "cohort_loss"), 0);
  EXPECT_GT(sample(text, "cohort_samples_per_second"), 0);
  EXPECT_GT(sample(text, "cohort_bytes_sent_total"), 0);
  EXPECT_GT(sample(text, "cohort_collective_wait_seconds_count"), 0);
  EXPECT_GT(sample(text, "cohort_collective_latency_seconds_count{op=\"allreduce\"}"), 0)
      << prom->body;
  EXPECT_EQ(sample(text, "cohort_worker_state{rank=\"1\",state=\"training\"}"), 1);

  // The event stream: a first update with everything, then new progress as it happens.
  std::vector<json> updates;
  auto stream = c.Get("/api/stream", [&](const char* data, size_t n) {
    static thread_local std::string buf;
    buf.append(data, n);
    for (size_t end; (end = buf.find("\n\n")) != std::string::npos;) {
      std::string ev = buf.substr(0, end);
      buf.erase(0, end + 2);
      auto d = ev.find("data: ");
      if (ev.rfind("event: update", 0) == 0 && d != std::string::npos) {
        updates.push_back(json::parse(ev.substr(d + 6)));
      }
    }
    // Stop once an update brought progress records beyond the first update's.
    return !(updates.size() >= 2 && !updates.back()["metrics"].empty());
  });
  ASSERT_GE(updates.size(), 2u);
  ASSERT_FALSE(updates[0]["metrics"].empty());
  EXPECT_GT(updates.back()["metrics"][0]["step"].get<int64_t>(),
            updates[0]["metrics"].back()["step"].get<int64_t>());

  // `cohort status URL` and `cohort status` (the newest runs/*/console.url).
  for (const std::string& arg : {url, std::string()}) {
    auto r = cohort::e2e::sh(
        "bash -c 'cd " + root.string() + " && " + COHORT_BINARY + " status " + arg + "'", 60);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("job fashion-mlp  running  step "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("\nrank      host             pid"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("training"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("console_started"), std::string::npos) << r.output;
  }
  auto js = cohort::e2e::sh(std::string(COHORT_BINARY) + " status --json " + url, 60);
  ASSERT_EQ(js.exit_code, 0) << js.output;
  EXPECT_EQ(json::parse(js.output)["workers"].size(), 2u);

  ::kill(job->pid(), SIGINT);
  auto st = job->wait_for(60s);
  ASSERT_TRUE(st);
  EXPECT_TRUE(cohort::testing::exited_with(st, 130)) << job->err();
  // The console went with the job; status says so.
  auto gone = cohort::e2e::sh(std::string(COHORT_BINARY) + " status " + url, 60);
  EXPECT_EQ(gone.exit_code, 1);
  EXPECT_NE(gone.output.find("cannot reach the console at " + url), std::string::npos)
      << gone.output;
  fs::remove_all(root);
}

TEST(Console, BrowserSeesCurvesAndWorkerRowsUpdateLive) {
  auto root = fresh_dir("browser");
  auto run_dir = root / "run";
  auto job = start_job(run_dir);
  std::string url = wait_for_url(run_dir, *job);
  ASSERT_FALSE(url.empty());
  // Kept where CI keeps build outputs, for a person to look at.
  fs::path shot = fs::path(COHORT_BINARY).parent_path() / "console-screenshot.png";
  fs::remove(shot);
  auto r = cohort::e2e::sh(
      "node " + source("web/test/console.test.mjs") + " " + url + " " + shot.string() + " 2", 200);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_GT(fs::exists(shot) ? fs::file_size(shot) : 0, 20000u) << shot;
  ::kill(job->pid(), SIGINT);
  EXPECT_TRUE(job->wait_for(60s));
  fs::remove_all(root);
}

TEST(Console, BadDashboardSettingsStopTheJobBeforeItStarts) {
  auto root = fresh_dir("bad");
  auto r =
      cohort::e2e::sh(std::string(COHORT_BINARY) + " run " + source("examples/fashion-mlp.yaml") +
                          " --run-dir " + (root / "a").string() + " --set dashboard.port=70000",
                      60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--set dashboard.port=70000: dashboard.port: expected a port number in "
                          "[0, 65535], got 70000"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(root / "a" / "config.yaml"));

  // A port already taken: a clear error naming it, and no worker started.
  httplib::Server blocker;
  int port = blocker.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  r = cohort::e2e::sh(std::string(COHORT_BINARY) + " run " + source("examples/fashion-mlp.yaml") +
                          " --run-dir " + (root / "b").string() +
                          " --set dashboard.port=" + std::to_string(port),
                      60);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("console: cannot listen on 127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("worker_started"), std::string::npos);
  fs::remove_all(root);
}

}  // namespace
