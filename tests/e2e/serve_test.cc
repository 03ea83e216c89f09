// End to end: `cohort serve` with its clients (`cohort submit`, `jobs`, `cancel`, `logs`), real
// jobs run by it, its SQLite history across a restart, and concurrent submits.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>

#include "../cli/cohort_process.h"
#include "files.h"
#include "shell.h"

namespace fs = std::filesystem;
using cohort::e2e::sh;
using cohort::testing::CohortProcess;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

fs::path fresh_dir(const std::string& name) {
  return cohort::e2e::fresh_dir("serve", name);
}

std::string cohort() {
  return COHORT_BINARY;
}

// A small quick job: the MLP on synthetic data, one worker.
fs::path write_job(const fs::path& dir, const std::string& name, int max_steps, int seed = 0) {
  fs::path p = dir / (name + ".yaml");
  std::ofstream(p) << "name: " << name
                   << "\nworkers: 1\nmodel: {name: mlp}\n"
                      "data: {name: synthetic, samples: 4000, shape: [1, 8, 8], classes: 4}\n"
                      "train: {max_steps: "
                   << max_steps << ", log_every_steps: 5, batch_size: 32, seed: " << seed << "}\n"
                   << "checkpoint: {every_steps: 0}\n";
  return p;
}

class Server {
 public:
  Server(const fs::path& home, int max_workers) : home_(home) {
    fs::remove(home / "serve.url");
    proc_ = std::make_unique<CohortProcess>(
        std::vector<std::string>{"serve", "--home", home.string(), "--port", "0", "--max-workers",
                                 std::to_string(max_workers)});
    auto deadline = std::chrono::steady_clock::now() + 30s;
    while (std::chrono::steady_clock::now() < deadline) {
      std::ifstream in(home / "serve.url");
      if (in >> url_ && !url_.empty()) break;
      std::this_thread::sleep_for(50ms);
    }
    EXPECT_FALSE(url_.empty()) << proc_->out() << proc_->err();
  }
  ~Server() { stop(); }
  void stop() {
    if (!proc_) return;
    ::kill(proc_->pid(), SIGINT);
    auto st = proc_->wait_for(60s);
    EXPECT_TRUE(cohort::testing::exited_with(st, 0)) << proc_->err();
    proc_.reset();
  }
  const std::string& url() const { return url_; }
  std::string flag() const {
    return " --server " + url_ + " --token-file " + (home_ / "serve.token").string();
  }
  std::string url_flag() const { return " --server " + url_; }
  json jobs() const {
    httplib::Client c(url_.substr(0, url_.size() - 1));
    c.set_read_timeout(30, 0);
    auto res = c.Get("/api/jobs");
    EXPECT_TRUE(res && res->status == 200);
    return res ? json::parse(res->body, nullptr, false) : json();
  }
  // Waits until pred holds for the job list.
  json wait_for(const std::function<bool(const json&)>& pred, const std::string& what) const {
    auto deadline = std::chrono::steady_clock::now() + 180s;
    json j;
    while (std::chrono::steady_clock::now() < deadline) {
      j = jobs();
      if (j.is_array() && pred(j)) return j;
      std::this_thread::sleep_for(200ms);
    }
    ADD_FAILURE() << "timed out waiting for " << what << ": " << j.dump(2);
    return j;
  }

 private:
  fs::path home_;
  std::string url_;
  std::unique_ptr<CohortProcess> proc_;
};

json by_id(const json& jobs, int64_t id) {
  for (const auto& j : jobs) {
    if (j["id"] == id) return j;
  }
  return json();
}

// Submitting needs the server's token, which `cohort serve` keeps in a file only its owner can
// read; a token file that others can read is refused by name before anything is sent.
TEST(Serve, SubmittingNeedsTheTokenFromAFileOnlyItsOwnerCanRead) {
  auto dir = fresh_dir("token");
  {
    Server server(dir / "home", 2);
    const fs::path token = dir / "home" / "serve.token";
    ASSERT_TRUE(fs::exists(token));
    EXPECT_EQ(fs::status(token).permissions() & fs::perms::all,
              fs::perms::owner_read | fs::perms::owner_write);
    const fs::path job = write_job(dir, "needs-token", 10);

    auto none = sh(cohort() + " submit " + job.string() + server.url_flag(), 60);
    EXPECT_NE(none.exit_code, 0) << none.output;
    EXPECT_NE(none.output.find("needs the server's token"), std::string::npos) << none.output;

    const fs::path loose = dir / "loose.token";
    fs::copy_file(token, loose);
    fs::permissions(loose, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                               fs::perms::others_read);
    auto refused = sh(cohort() + " submit " + job.string() + server.url_flag() + " --token-file " +
                          loose.string(),
                      60);
    EXPECT_EQ(refused.exit_code, 2) << refused.output;
    EXPECT_NE(refused.output.find("--token-file " + loose.string() +
                                  ": other users can read or change it (mode 0644)"),
              std::string::npos)
        << refused.output;
    EXPECT_NE(refused.output.find("chmod 600"), std::string::npos) << refused.output;
    EXPECT_EQ(server.jobs(), json::array());

    auto ok = sh(cohort() + " submit " + job.string() + server.flag(), 60);
    EXPECT_EQ(ok.exit_code, 0) << ok.output;
    server.wait_for([](const json& j) { return j.size() == 1 && j[0]["state"] == "completed"; },
                    "the job to complete");
  }  // the server stops
  fs::remove_all(dir);
}

TEST(Serve, ABadJobFileIsRefusedWithRunsErrorAndNothingIsQueued) {
  auto dir = fresh_dir("bad");
  fs::path bad = dir / "bad.yaml";
  std::ofstream(bad) << "name: bad\ntrain:\n  batch_size: sixty\n";
  auto run = sh(cohort() + " run " + bad.string() + " --run-dir " + (dir / "run").string(), 60);
  ASSERT_EQ(run.exit_code, 2) << run.output;
  const std::string error = run.output.substr(std::string("cohort run: ").size());
  EXPECT_NE(error.find("bad.yaml:3:15: train.batch_size: expected a positive integer"),
            std::string::npos)
      << error;

  Server server(dir / "home", 2);
  auto submit = sh(cohort() + " submit " + bad.string() + server.flag(), 60);
  EXPECT_EQ(submit.exit_code, 2) << submit.output;
  EXPECT_EQ(submit.output, "cohort submit: " + error);
  // An override is checked the same way.
  fs::path good = write_job(dir, "good", 10);
  auto over = sh(cohort() + " submit " + good.string() + " --set train.lr=1" + server.flag(), 60);
  EXPECT_EQ(over.exit_code, 2) << over.output;
  EXPECT_NE(over.output.find("train.lr: unknown key; did you mean 'train.optimizer.lr'?"),
            std::string::npos)
      << over.output;
  // More workers than the server may ever run at once.
  auto big = sh(cohort() + " submit " + good.string() + " --set workers=3" + server.flag(), 60);
  EXPECT_EQ(big.exit_code, 2) << big.output;
  EXPECT_NE(big.output.find("this server runs at most 2 at once"), std::string::npos) << big.output;
  EXPECT_EQ(server.jobs(), json::array());
  fs::remove_all(dir);
}

TEST(Serve, ConcurrentSubmitsAreAllKeptRunInOrderAndSurviveARestart) {
  auto dir = fresh_dir("history");
  fs::path home = dir / "home";
  constexpr int kJobs = 8;
  std::vector<fs::path> files;
  for (int i = 0; i < kJobs; ++i) files.push_back(write_job(dir, "job" + std::to_string(i), 20, i));

  auto server = std::make_unique<Server>(home, 1);  // one worker at a time: the rest wait
  // Eight clients at once.
  std::vector<cohort::e2e::Result> results(kJobs);
  std::vector<std::thread> clients;
  for (int i = 0; i < kJobs; ++i) {
    clients.emplace_back([&, i] {
      results[i] = sh(cohort() + " submit --json " + files[i].string() + server->flag(), 60);
    });
  }
  for (auto& t : clients) t.join();
  std::set<int64_t> ids;
  for (const auto& r : results) {
    ASSERT_EQ(r.exit_code, 0) << r.output;
    ids.insert(json::parse(r.output)["id"].get<int64_t>());
  }
  EXPECT_EQ(ids.size(), static_cast<size_t>(kJobs));
  json jobs = server->jobs();
  ASSERT_EQ(jobs.size(), static_cast<size_t>(kJobs));
  for (int64_t id : ids) EXPECT_FALSE(by_id(jobs, id).is_null()) << id;

  // The first two to be queued run to completion, one at a time.
  const int64_t first = *ids.begin(), second = *std::next(ids.begin());
  jobs = server->wait_for(
      [&](const json& j) {
        return by_id(j, first)["state"] == "completed" && by_id(j, second)["state"] == "completed";
      },
      "the first two jobs to complete");
  json a = by_id(jobs, first), b = by_id(jobs, second);
  EXPECT_LE(a["finished"].get<double>(), b["started"].get<double>() + 0.5);  // never both at once
  EXPECT_EQ(a["summary"]["steps"], 20);

  // The list as `cohort jobs` prints it.
  auto table = sh(cohort() + " jobs" + server->flag(), 60);
  EXPECT_EQ(table.exit_code, 0) << table.output;
  EXPECT_EQ(table.output.rfind("id    name                 state      workers", 0), 0u)
      << table.output;
  const std::string name = a["name"];
  EXPECT_NE(table.output.find(name + std::string(21 - name.size(), ' ') + "completed  1"),
            std::string::npos)
      << table.output;

  // Cancel a queued job; logs of a finished one.
  const int64_t last = *ids.rbegin();
  auto cancel = sh(cohort() + " cancel " + std::to_string(last) + server->flag(), 60);
  EXPECT_EQ(cancel.exit_code, 0) << cancel.output;
  EXPECT_EQ(cancel.output, "job " + std::to_string(last) + ": cancelled\n");
  auto again = sh(cohort() + " cancel " + std::to_string(last) + server->flag(), 60);
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_NE(again.output.find("has already ended (cancelled)"), std::string::npos) << again.output;
  auto logs = sh(cohort() + " logs " + std::to_string(first) + server->flag(), 60);
  EXPECT_EQ(logs.exit_code, 0) << logs.output;
  EXPECT_NE(logs.output.find("==> launcher <=="), std::string::npos) << logs.output;
  EXPECT_NE(logs.output.find("==> rank-0.log <=="), std::string::npos) << logs.output;
  EXPECT_NE(logs.output.find("joined job 'job"), std::string::npos) << logs.output;

  // What the server shows of a finished job before the restart...
  httplib::Client c(server->url().substr(0, server->url().size() - 1));
  auto metrics_before = c.Get("/jobs/" + std::to_string(first) + "/api/metrics");
  ASSERT_TRUE(metrics_before);
  ASSERT_EQ(metrics_before->status, 200);
  EXPECT_EQ(json::parse(metrics_before->body).size(), 4u);  // steps 5, 10, 15, 20

  server->stop();  // a running job is stopped as Ctrl-C would stop it
  server = std::make_unique<Server>(home, 1);
  json after = server->jobs();
  ASSERT_EQ(after.size(), static_cast<size_t>(kJobs));
  EXPECT_EQ(by_id(after, first)["state"], "completed");
  EXPECT_EQ(by_id(after, second)["state"], "completed");
  EXPECT_EQ(by_id(after, last)["state"], "cancelled");
  EXPECT_EQ(by_id(after, first)["summary"], a["summary"]);
  httplib::Client c2(server->url().substr(0, server->url().size() - 1));
  auto metrics_after = c2.Get("/jobs/" + std::to_string(first) + "/api/metrics");
  ASSERT_TRUE(metrics_after);
  EXPECT_EQ(metrics_after->body, metrics_before->body);
  auto job_after = c2.Get("/jobs/" + std::to_string(first) + "/api/job");
  ASSERT_TRUE(job_after);
  json j = json::parse(job_after->body);
  EXPECT_EQ(j["state"], "completed");
  EXPECT_EQ(j["summary"]["steps"], 20);
  EXPECT_NE(j["config"].get<std::string>().find("max_steps: 20"), std::string::npos);
  auto workers_after = c2.Get("/jobs/" + std::to_string(first) + "/api/workers");
  ASSERT_TRUE(workers_after);
  json w = json::parse(workers_after->body);
  ASSERT_EQ(w.size(), 1u) << w.dump();
  EXPECT_EQ(w[0]["state"], "finished");
  EXPECT_EQ(w[0]["step"], 20);
  auto page = c2.Get("/jobs/" + std::to_string(first) + "/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_EQ(c2.Get("/jobs/999999/api/job")->status, 404);

  // Two finished jobs overlaid, in Chromium.
  fs::path shot = fs::path(COHORT_BINARY).parent_path() / "compare-screenshot.png";
  auto browser =
      sh("node " + std::string(COHORT_SOURCE_DIR) + "/web/test/compare.test.mjs " + server->url() +
             " " + std::to_string(first) + " " + std::to_string(second) + " " + shot.string(),
         120);
  EXPECT_EQ(browser.exit_code, 0) << browser.output;

  // The queued jobs still run after the restart; cancel them to end the test.
  for (const auto& job : server->jobs()) {
    if (job["state"] == "queued" || job["state"] == "running") {
      sh(cohort() + " cancel " + std::to_string(job["id"].get<int64_t>()) + server->flag(), 60);
    }
  }
  server->stop();
  fs::remove_all(dir);
}

}  // namespace
