// End to end: fault tolerance of `cohort run` against real signals from outside. A worker is
// SIGKILLed or SIGSTOPped mid-epoch; the job must finish, count every sample of every epoch
// exactly once, and report the failure and the recovery in events.jsonl and summary.json.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "../store/etcd_cluster.h"
#include "cohort/store/etcd_store.h"
#include "files.h"
#include "shell.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

fs::path fresh_dir(const std::string& name) {
  return cohort::e2e::fresh_dir("elastic", name);
}

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

std::vector<json> read_events(const fs::path& dir) {
  std::vector<json> out;
  std::ifstream in(dir / "events.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    try {
      out.push_back(json::parse(line));
    } catch (const json::exception&) {
      // A line being written right now.
    }
  }
  return out;
}

long last_step(const fs::path& dir) {
  std::ifstream in(dir / "metrics.jsonl");
  std::string line;
  long step = 0;
  while (std::getline(in, line)) {
    try {
      step = json::parse(line).value("step", step);
    } catch (const json::exception&) {
    }
  }
  return step;
}

std::string example(const std::string& name) {
  return std::string(COHORT_SOURCE_DIR) + "/examples/" + name;
}

// `cohort run` in its own process group, so that the test can always clean everything up.
// `extra`: more options after the --set ones.
class Launcher {
 public:
  Launcher(const fs::path& dir, const std::vector<std::string>& sets,
           const std::vector<std::string>& extra = {})
      : Launcher(dir, "run", job_args(dir / "run", sets, extra)) {}
  // `cohort run ARGS`, its output in DIR/NAME.txt, its run directory DIR/NAME.
  Launcher(const fs::path& dir, const std::string& name, const std::vector<std::string>& run_args)
      : dir_(dir), name_(name) {
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      int fd = ::open(out_path().c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      std::vector<std::string> args = {COHORT_BINARY, "run"};
      args.insert(args.end(), run_args.begin(), run_args.end());
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(COHORT_BINARY, argv.data());
      _exit(127);
    }
  }
  ~Launcher() {
    if (pid_ > 0 && !reaped_) {
      kill(-pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  fs::path run() const { return dir_ / name_; }
  std::string output() const {
    std::ifstream in(out_path());
    return std::string((std::istreambuf_iterator<char>(in)), {});
  }
  // Waits for `cond` (polled every 20 ms) up to `limit`.
  bool wait_until(const std::function<bool()>& cond, std::chrono::seconds limit) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      if (cond()) return true;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }
  // The launcher's exit code, or -1 if it did not exit within `limit`.
  int wait_exit(std::chrono::seconds limit) {
    int st = 0;
    bool done = wait_until([&] { return waitpid(pid_, &st, WNOHANG) == pid_; }, limit);
    if (!done) return -1;
    reaped_ = true;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
  pid_t pid() const { return pid_; }
  // What workers join (the job_started event's "coordinator"), once the job has started; "" if it
  // did not within `limit`.
  std::string join_address(std::chrono::seconds limit) {
    std::string where;
    wait_until(
        [&] {
          for (const auto& e : read_events(run())) {
            if (e.value("event", "") == "job_started") where = e.value("coordinator", "");
          }
          return !where.empty();
        },
        limit);
    return where;
  }
  // The pid `cohort run` started for `rank` (from events.jsonl).
  int worker_pid(int rank) {
    for (const auto& e : read_events(run())) {
      if (e.value("event", "") == "worker_started" && e.value("rank", -1) == rank) {
        return e.value("pid", 0);
      }
    }
    return 0;
  }

 private:
  static std::vector<std::string> job_args(const fs::path& run_dir,
                                           const std::vector<std::string>& sets,
                                           const std::vector<std::string>& extra) {
    std::vector<std::string> args = {example("fashion-mlp.yaml"), "--run-dir", run_dir.string()};
    for (const auto& s : sets) {
      args.push_back("--set");
      args.push_back(s);
    }
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }
  fs::path out_path() const { return dir_ / (name_ == "run" ? "out.txt" : name_ + ".txt"); }

  fs::path dir_;
  std::string name_;
  pid_t pid_ = -1;
  bool reaped_ = false;
};

const json* find_event(const std::vector<json>& events, const std::string& name,
                       const std::function<bool(const json&)>& also = nullptr) {
  for (const auto& e : events) {
    if (e.value("event", "") == name && (!also || also(e))) return &e;
  }
  return nullptr;
}

// Every epoch trained on each of the 60000 Fashion-MNIST examples exactly once: the count, the sum
// and the sum of squares of the example indices match those of [0, N).
void expect_every_sample_once(const json& summary, int epochs) {
  const double n = 60000;
  const json& per_epoch = summary["epoch_samples"];
  ASSERT_EQ(per_epoch.size(), static_cast<size_t>(epochs)) << summary.dump(2);
  for (const auto& e : per_epoch) {
    EXPECT_EQ(e["samples"].get<double>(), n) << e.dump();
    EXPECT_EQ(e["id_sum"].get<double>(), n * (n - 1) / 2) << e.dump();
    EXPECT_EQ(e["id_sq_sum"].get<double>(), (n - 1) * n * (2 * n - 1) / 6) << e.dump();
  }
}

std::vector<fs::path> checkpoint_files(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    auto name = e.path().filename().string();
    if (name.starts_with("ckpt-") && name.ends_with(".cohort")) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Three workers, one epoch of Fashion-MNIST with the MLP: 313 steps.
const std::vector<std::string> kJob = {"workers=3", "train.epochs=1", "train.seed=7",
                                       "checkpoint.every_steps=0"};

TEST(Elastic, KilledWorkerIsReplacedAndTheJobFinishesAsWellAsWithoutFailure) {
  auto dir = fresh_dir("kill");
  // Two epochs: time for the replacement to start (libtorch, the data set) and be admitted.
  auto job = kJob;
  job[1] = "train.epochs=2";
  // The same job without a failure, for the accuracy to compare with.
  json clean;
  {
    Launcher run(dir / "clean", job);
    ASSERT_EQ(run.wait_exit(180s), 0) << run.output();
    clean = read_json(run.run() / "summary.json");
    expect_every_sample_once(clean, 2);
  }
  auto sets = job;
  for (const char* s :
       // failure_timeout_s 2: a survivor writing its checkpoint when the abort comes, on a
       // loaded machine, may take over a second to leave the epoch, and would be lost too.
       {"elastic.max_restarts=1", "elastic.min_workers=2", "elastic.heartbeat_s=0.2",
        "elastic.failure_timeout_s=2", "elastic.snapshot_every_steps=10", "dashboard.port=0",
        // A checkpoint on every snapshot step: the replacement is admitted on one of them.
        "checkpoint.every_steps=10", "checkpoint.keep=1000"}) {
    sets.push_back(s);
  }
  Launcher run(dir / "faulty", sets);
  // Mid-epoch (313 steps per epoch at three workers): kill rank 1 from outside.
  ASSERT_TRUE(run.wait_until([&] { return last_step(run.run()) >= 40; }, 120s)) << run.output();
  int victim = run.worker_pid(1);
  ASSERT_GT(victim, 0);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  // The console follows the replacement (rank 3): a row of its own that says whom it replaces,
  // with the step it reports once it trains.
  std::ifstream url_file(run.run() / "console.url");
  std::string url;
  std::getline(url_file, url);
  ASSERT_FALSE(url.empty());
  // "http://127.0.0.1:PORT/"
  httplib::Client console("127.0.0.1", std::stoi(url.substr(url.rfind(':') + 1)));
  console.set_read_timeout(5, 0);
  json replacement;
  run.wait_until(
      [&] {
        auto res = console.Get("/api/workers");
        if (!res || res->status != 200) return false;
        for (const auto& w : json::parse(res->body)) {
          if (w.value("replaces", -1) == 1 && w.contains("step")) replacement = w;
        }
        return !replacement.is_null();
      },
      120s);
  ASSERT_TRUE(replacement.is_object()) << "the console showed no row for the replacement";
  EXPECT_EQ(replacement.value("rank", -1), 3) << replacement.dump();
  ASSERT_EQ(run.wait_exit(180s), 0) << run.output();

  auto s = read_json(run.run() / "summary.json");
  EXPECT_EQ(s["status"], "completed");
  EXPECT_GE(s["recoveries"].get<int>(), 1) << s.dump(2);
  EXPECT_LT(s["recovery_seconds_max"].get<double>(), 3.0) << s.dump(2);
  EXPECT_EQ(s["restarts"], 1);
  EXPECT_EQ(s["final_world_size"], 3) << "the replacement did not rejoin";
  expect_every_sample_once(s, 2);
  EXPECT_NEAR(s["test_accuracy"].get<double>(), clean["test_accuracy"].get<double>(), 0.01)
      << "with failure " << s["test_accuracy"] << ", without " << clean["test_accuracy"];
  // The replicas agree after recovery and the replacement's arrival.
  for (const auto& r : s["per_rank"])
    EXPECT_EQ(r["parameter_digest"], s["per_rank"][0]["parameter_digest"]);
  // No periodic checkpoint was skipped, not even the one of the step the replacement joined at.
  std::set<std::string> written;
  for (const auto& f : checkpoint_files(run.run() / "checkpoints")) {
    written.insert(f.filename().string());
  }
  const int steps = s["steps"].get<int>();
  for (int step = 10; step <= steps; step += 10) {
    char name[64];
    std::snprintf(name, sizeof(name), "ckpt-%012d.cohort", step);
    EXPECT_TRUE(written.count(name)) << name << " is missing (" << steps << " steps)";
  }

  auto events = read_events(run.run());
  const json* lost = find_event(events, "worker_lost");
  ASSERT_NE(lost, nullptr);
  EXPECT_EQ((*lost)["rank"], 1);
  EXPECT_EQ((*lost)["pid"], victim);
  EXPECT_FALSE((*lost)["host"].get<std::string>().empty());
  const std::string cause = (*lost)["cause"];
  EXPECT_TRUE(cause.find("SIGKILL") != std::string::npos ||
              cause.find("connection") != std::string::npos)
      << cause;
  EXPECT_NE(
      find_event(events, "membership_changed", [](const json& e) { return e["world_size"] == 2; }),
      nullptr);
  EXPECT_NE(find_event(events, "membership_changed",
                       [](const json& e) { return e["world_size"] == 3 && e["kind"] == "grow"; }),
            nullptr);
  EXPECT_NE(find_event(events, "recovered"), nullptr);
  EXPECT_NE(
      find_event(events, "worker_started", [](const json& e) { return e.contains("replaces"); }),
      nullptr);
  fs::remove_all(dir);
}

TEST(Elastic, StoppedWorkerIsExcludedByHeartbeatAndExitsWhenResumed) {
  auto dir = fresh_dir("stop");
  auto sets = kJob;
  for (const char* s : {"elastic.min_workers=2", "elastic.heartbeat_s=0.2",
                        "elastic.failure_timeout_s=1", "elastic.snapshot_every_steps=10"}) {
    sets.push_back(s);
  }
  Launcher run(dir, sets);
  ASSERT_TRUE(run.wait_until([&] { return last_step(run.run()) >= 40; }, 120s)) << run.output();
  int victim = run.worker_pid(2);
  ASSERT_GT(victim, 0);
  ASSERT_EQ(kill(victim, SIGSTOP), 0);
  // Detected by the missing heartbeat (comm.timeout_s is 30 s), excluded, and the job goes on.
  bool excluded = run.wait_until(
      [&] { return find_event(read_events(run.run()), "membership_changed") != nullptr; }, 60s);
  if (!excluded) kill(victim, SIGCONT);
  ASSERT_TRUE(excluded) << run.output();
  long step_at_exclusion = last_step(run.run());
  ASSERT_EQ(kill(victim, SIGCONT), 0);
  // Resumed, it finds itself excluded and exits on its own while the job still runs.
  bool gone = run.wait_until(
      [&] {
        return find_event(read_events(run.run()), "worker_exited",
                          [](const json& e) { return e["rank"] == 2; }) != nullptr;
      },
      60s);
  EXPECT_TRUE(gone);
  ASSERT_EQ(run.wait_exit(180s), 0) << run.output();

  auto events = read_events(run.run());
  const json* lost = find_event(events, "worker_lost");
  ASSERT_NE(lost, nullptr);
  EXPECT_EQ((*lost)["rank"], 2);
  EXPECT_EQ((*lost)["pid"], victim);
  EXPECT_NE((*lost)["cause"].get<std::string>().find("heartbeat missed"), std::string::npos)
      << (*lost)["cause"];
  const json* exited =
      find_event(events, "worker_exited", [](const json& e) { return e["rank"] == 2; });
  ASSERT_NE(exited, nullptr);
  EXPECT_EQ((*exited)["excluded"], true) << exited->dump();
  std::ifstream log(run.run() / "logs" / "rank-2.log");
  std::string text((std::istreambuf_iterator<char>(log)), {});
  EXPECT_NE(text.find("excluded from the job"), std::string::npos) << text;

  auto s = read_json(run.run() / "summary.json");
  EXPECT_EQ(s["status"], "completed");
  EXPECT_EQ(s["final_world_size"], 2);
  EXPECT_GE(s["recoveries"].get<int>(), 1);
  EXPECT_GT(s["steps"].get<long>(), step_at_exclusion);
  expect_every_sample_once(s, 1);
  for (const auto& r : s["per_rank"])
    EXPECT_EQ(r["parameter_digest"], s["per_rank"][0]["parameter_digest"]);
  fs::remove_all(dir);
}

// A worker started elsewhere, as mpirun, srun or a Kubernetes Indexed Job start them, `cohort
// worker --join ... --rank R`, in a process group of its own; killed with the test.
class ExternalWorker {
 public:
  ExternalWorker(const fs::path& log, int port, const std::string& token, int rank)
      : ExternalWorker(log, "127.0.0.1:" + std::to_string(port), token, rank) {}
  ExternalWorker(const fs::path& log, const std::string& join, const std::string& token, int rank) {
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      std::vector<std::string> args = {COHORT_BINARY,  "worker", "--join",
                                       join,           "--rank", std::to_string(rank),
                                       "--token-file", token};
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(COHORT_BINARY, argv.data());
      _exit(127);
    }
  }
  ~ExternalWorker() {
    if (reaped_) return;
    kill(-pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  pid_t pid() const { return pid_; }
  // The worker's exit code, or -1 if it did not exit within `limit`.
  int wait_exit(std::chrono::seconds limit) {
    int st = 0;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        reaped_ = true;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
      std::this_thread::sleep_for(20ms);
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
};

// What srun, mpirun or a Kubernetes Job do when a worker dies: start a new process under the same
// rank. A rank names one process for the whole job, so it joins as a replacement under a fresh
// rank, and the job goes on at full size with every sample trained on once.
TEST(Elastic, AWorkerRestartedUnderItsRankByAClusterLauncherJoinsAsAReplacement) {
  auto dir = fresh_dir("relaunched");
  const std::string token = (dir / "token").string();
  const int port = 20000 + (::getpid() + 7) % 20000;
  // Rank 0 takes 10 ms more per step, so that the job lasts while the replacement starts.
  Launcher run(dir,
               {"workers=2", "train.epochs=1", "train.seed=7", "checkpoint.every_steps=0",
                "elastic.min_workers=1", "elastic.max_restarts=2", "elastic.heartbeat_s=0.2",
                "elastic.failure_timeout_s=1", "elastic.snapshot_every_steps=10",
                "faults=[{kind: slow, rank: 0, at_step: 0, seconds: 0.01}]"},
               {"--external-workers", "--port", std::to_string(port), "--token-file", token});
  ASSERT_TRUE(run.wait_until([&] { return fs::exists(token) && fs::file_size(token) > 0; }, 30s))
      << run.output();
  ExternalWorker w0(dir / "w0.log", port, token, 0);
  auto w1 = std::make_unique<ExternalWorker>(dir / "w1.log", port, token, 1);
  ASSERT_TRUE(run.wait_until([&] { return last_step(run.run()) >= 60; }, 120s)) << run.output();
  ASSERT_EQ(kill(w1->pid(), SIGKILL), 0);
  ExternalWorker again(dir / "w1-again.log", port, token, 1);
  ASSERT_EQ(run.wait_exit(180s), 0) << run.output();

  std::ifstream log(dir / "w1-again.log");
  std::string text((std::istreambuf_iterator<char>(log)), {});
  EXPECT_NE(text.find("rank 1 has joined this job before: joining as replacement rank 2"),
            std::string::npos)
      << text;
  auto events = read_events(run.run());
  EXPECT_NE(find_event(events, "membership_changed",
                       [](const json& e) { return e["added"] == json::array({2}); }),
            nullptr);
  auto s = read_json(run.run() / "summary.json");
  EXPECT_EQ(s["status"], "completed");
  EXPECT_EQ(s["final_world_size"], 2);
  EXPECT_GE(s["recoveries"].get<int>(), 1);
  std::set<int> ranks;
  for (const auto& r : s["per_rank"]) ranks.insert(r["job_rank"].get<int>());
  EXPECT_EQ(ranks, (std::set<int>{0, 2}));
  expect_every_sample_once(s, 1);
  fs::remove_all(dir);
}

// Workers started elsewhere wait for a coordinator that is gone up to elastic.coordinator_wait_s,
// then fence themselves and exit within a few seconds of last words.
TEST(Elastic, WorkersStartedElsewhereExitSoonAfterTheCoordinatorDies) {
  auto dir = fresh_dir("orphans");
  const std::string token = (dir / "token").string();
  const int port = 20000 + (::getpid() + 13) % 20000;
  Launcher run(dir,
               {"workers=2", "train.epochs=5", "checkpoint.every_steps=0",
                "elastic.heartbeat_s=0.2", "elastic.failure_timeout_s=2",
                "elastic.coordinator_wait_s=3"},
               {"--external-workers", "--port", std::to_string(port), "--token-file", token});
  ASSERT_TRUE(run.wait_until([&] { return fs::exists(token) && fs::file_size(token) > 0; }, 30s))
      << run.output();
  ExternalWorker w0(dir / "w0.log", port, token, 0), w1(dir / "w1.log", port, token, 1);
  ASSERT_TRUE(run.wait_until([&] { return last_step(run.run()) >= 20; }, 120s)) << run.output();
  ASSERT_EQ(kill(-run.pid(), SIGKILL), 0);
  run.wait_exit(10s);
  const auto t0 = std::chrono::steady_clock::now();
  for (pid_t pid : {w0.pid(), w1.pid()}) {
    int st = 0;
    ASSERT_TRUE(run.wait_until([&] { return waitpid(pid, &st, WNOHANG) == pid; }, 20s))
        << "worker " << pid << " still runs 20 s after its coordinator died";
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 12s);
  fs::remove_all(dir);
}

// coordinator.store in etcd: the job's keys are there while it runs (not in the coordinator), the
// loss of one member of a three-member etcd cluster goes unnoticed, and the keys go with the job.
TEST(Elastic, AJobKeptInEtcdTrainsThroughTheLossOfAnEtcdMember) {
  auto dir = fresh_dir("etcd");
  cohort::store::testing::EtcdCluster etcd(3);
  std::vector<std::string> sets = kJob;
  sets.push_back("coordinator.store=" + etcd.url("jobs"));
  Launcher run(dir, sets);
  const std::string where = run.join_address(60s);
  ASSERT_FALSE(where.empty()) << run.output();
  ASSERT_TRUE(where.starts_with(etcd.url("jobs") + "/run-")) << where;
  cohort::store::EtcdStore job(cohort::store::EtcdAddress::parse(where), 10s);
  EXPECT_TRUE(job.check({"job/config"}));
  ASSERT_TRUE(run.wait_until([&] { return last_step(run.run()) >= 60; }, 180s)) << run.output();
  etcd.kill(0);
  ASSERT_EQ(run.wait_exit(300s), 0) << run.output();
  const json summary = read_json(run.run() / "summary.json");
  EXPECT_EQ(summary["status"], "completed");
  EXPECT_EQ(summary["workers_lost"], 0) << summary.dump(2);
  EXPECT_EQ(summary["membership_epoch"], 0) << summary.dump(2);
  expect_every_sample_once(summary, 1);
  EXPECT_FALSE(job.check({"job/config"})) << "the finished job's keys are still in etcd";
  fs::remove_all(dir);
}

// Whether process `pid` has ended (gone, or a zombie nobody has reaped yet).
bool ended(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), {});
  const size_t paren = text.rfind(')');
  return text.empty() || (paren != std::string::npos && text.substr(paren + 2, 1) == "Z");
}

// The store in etcd, a standby coordinator beside the first: the first is SIGKILLed mid-epoch
// (alone: its workers, started by it or elsewhere, are not); the standby takes the job over within
// the failure timeout, the same worker processes train on without a step rolled back, and every
// sample is seen once. `stop`: the first is SIGSTOPped instead, and continued once the standby
// leads: it must see that it lost the lead and leave, its workers alive and the job's keys there.
// `first`: the standby is started before the job, at the address --run-id gives it (as on
// Kubernetes, where both pods start at once): it waits for the job to start.
enum class Loss { Kill, Stop };
void standby_drill(const std::string& name, bool external, Loss loss = Loss::Kill,
                   bool standby_first = false) {
  auto dir = fresh_dir(name);
  cohort::store::testing::EtcdCluster etcd(1);
  const std::string token = (dir / "token").string();
  std::vector<std::string> extra = {"--token-file", token};
  if (external) extra.push_back("--external-workers");
  const std::string run_id = "drill-" + std::to_string(::getpid());
  std::optional<Launcher> early;
  if (standby_first) {
    extra.insert(extra.end(), {"--run-id", run_id});
    early.emplace(dir, "standby",
                  std::vector<std::string>{"--standby", etcd.url("jobs") + "/" + run_id,
                                           "--run-dir", (dir / "standby").string()});
    ASSERT_TRUE(early->wait_until(
        [&] { return early->output().find("waiting for the job") != std::string::npos; }, 120s))
        << early->output();
  }
  // Stopped, the first must come back while its workers still train: a longer job.
  const int epochs = loss == Loss::Kill ? 1 : 4;
  Launcher first(dir,
                 {"workers=2", "train.epochs=" + std::to_string(epochs), "train.seed=7",
                  "checkpoint.every_steps=0", "elastic.heartbeat_s=0.2",
                  "elastic.failure_timeout_s=2", "coordinator.store=" + etcd.url("jobs")},
                 extra);
  const std::string where = first.join_address(60s);
  ASSERT_FALSE(where.empty()) << first.output();
  if (standby_first) {
    EXPECT_EQ(where, etcd.url("jobs") + "/" + run_id);
  }
  ASSERT_TRUE(first.wait_until([&] { return fs::exists(token); }, 10s)) << first.output();
  std::optional<ExternalWorker> w0, w1;
  if (external) {
    w0.emplace(dir / "w0.log", where, token, 0);
    w1.emplace(dir / "w1.log", where, token, 1);
  }
  if (!early) {
    early.emplace(dir, "standby",
                  std::vector<std::string>{"--standby", where, "--run-dir",
                                           (dir / "standby").string()});
  }
  Launcher& standby = *early;
  ASSERT_TRUE(standby.wait_until(
      [&] {
        return standby.output().find("taking it over when that is gone") != std::string::npos;
      },
      60s))
      << standby.output();
  ASSERT_TRUE(first.wait_until([&] { return last_step(first.run()) >= 60; }, 180s))
      << first.output();
  const pid_t p0 = external ? w0->pid() : first.worker_pid(0);
  const pid_t p1 = external ? w1->pid() : first.worker_pid(1);
  ASSERT_EQ(kill(first.pid(), loss == Loss::Kill ? SIGKILL : SIGSTOP), 0);
  const double killed_at =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  if (loss == Loss::Kill) {
    first.wait_exit(10s);
  } else {
    ASSERT_TRUE(standby.wait_until(
        [&] {
          const std::vector<json> events = read_events(standby.run());
          return find_event(events, "coordinator_took_over") != nullptr;
        },
        30s))
        << standby.output();
    ASSERT_FALSE(ended(p0) || ended(p1)) << "the job ended before the first coordinator came back";
    kill(first.pid(), SIGCONT);
    EXPECT_EQ(first.wait_exit(30s), 1) << first.output();
    EXPECT_NE(first.output().find("lost the lead of the job"), std::string::npos) << first.output();
  }
  EXPECT_FALSE(ended(p0) || ended(p1)) << "a worker died with its coordinator";
  ASSERT_EQ(standby.wait_exit(300s), 0) << standby.output();
  if (external) {
    EXPECT_EQ(w0->wait_exit(30s), 0);
    EXPECT_EQ(w1->wait_exit(30s), 0);
  } else {
    EXPECT_TRUE(standby.wait_until([&] { return ended(p0) && ended(p1); }, 30s));
  }
  const std::vector<json> events = read_events(standby.run());
  EXPECT_EQ(find_event(events, "worker_started"), nullptr) << "the standby started a worker";
  const json* took = find_event(events, "coordinator_took_over");
  ASSERT_NE(took, nullptr) << standby.output();
  EXPECT_LT(took->value("time", 0.0) - killed_at, 2.0 + 3.0) << "took over late";
  const json summary = read_json(standby.run() / "summary.json");
  EXPECT_EQ(summary["status"], "completed") << summary.dump(2);
  EXPECT_NE(summary.value("took_over_from", "").find("pid"), std::string::npos) << summary.dump(2);
  // From the killed one's last sign of life to the standby leading: within the lease and a bit.
  const double takeover = summary.value("coordinator_takeover_seconds", -1.0);
  EXPECT_GT(takeover, 0.0) << summary.dump(2);
  if (loss == Loss::Kill) {
    EXPECT_LT(takeover, 2.0 + 3.0) << summary.dump(2);
  }
  EXPECT_EQ(summary["workers_lost"], 0) << summary.dump(2);
  EXPECT_EQ(summary["steps_rolled_back"], 0) << summary.dump(2);
  expect_every_sample_once(summary, epochs);
  fs::remove_all(dir);
}

TEST(Elastic, AStandbyCoordinatorTakesOverWorkersStartedElsewhere) {
  standby_drill("standby-external", true);
}

TEST(Elastic, AStandbyCoordinatorTakesOverTheWorkersItsPredecessorStarted) {
  standby_drill("standby-local", false);
}

TEST(Elastic, AStandbyStartedBeforeItsJobWaitsForItThenTakesItOver) {
  standby_drill("standby-first", true, Loss::Kill, true);
}

TEST(Elastic, ACoordinatorThatLostTheLeadLeavesTheJobToTheStandby) {
  standby_drill("standby-stopped", false, Loss::Stop);
}

// Lines in a file (0 when it is not there).
size_t line_count(const fs::path& p) {
  std::ifstream in(p);
  return static_cast<size_t>(std::count(std::istreambuf_iterator<char>(in), {}, '\n'));
}

// The embedded store: `cohort run` SIGKILLed mid-epoch, alone. Its workers train on without it
// (their step logs grow), and `cohort run --resume` re-adopts them from the store's journal: the
// same processes finish the job, no step is rolled back, every sample is seen once, the progress
// records of the gap reach metrics.jsonl, and the summary names the coordinator it took over from.
TEST(Elastic, ACoordinatorStartedAgainReadoptsTheWorkersThatStillRun) {
  auto dir = fresh_dir("readopt");
  Launcher first(dir, {"workers=2", "train.epochs=2", "train.seed=7", "checkpoint.every_steps=0",
                       "elastic.heartbeat_s=0.2", "elastic.failure_timeout_s=2"});
  ASSERT_TRUE(first.wait_until([&] { return last_step(first.run()) >= 40; }, 180s))
      << first.output();
  const pid_t p0 = first.worker_pid(0), p1 = first.worker_pid(1);
  ASSERT_TRUE(p0 > 0 && p1 > 0);
  ASSERT_TRUE(fs::exists(first.run() / "store.journal"));
  ASSERT_EQ(kill(first.pid(), SIGKILL), 0);
  EXPECT_EQ(first.wait_exit(10s), 128 + SIGKILL);
  const fs::path steps = first.run() / "steps" / "rank-0.jsonl";
  const size_t at_kill = line_count(steps);
  ASSERT_TRUE(first.wait_until([&] { return line_count(steps) >= at_kill + 30; }, 60s))
      << "the workers stopped training with their coordinator";
  ASSERT_FALSE(ended(p0) || ended(p1)) << "a worker died with its coordinator";

  Launcher again(dir, "again", {"--resume", first.run().string()});
  ASSERT_EQ(again.wait_exit(300s), 0) << again.output();
  EXPECT_NE(again.output().find("with the workers that still run"), std::string::npos)
      << again.output();
  EXPECT_TRUE(again.wait_until([&] { return ended(p0) && ended(p1); }, 30s));
  const json summary = read_json(first.run() / "summary.json");
  EXPECT_EQ(summary["status"], "completed") << summary.dump(2);
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  EXPECT_EQ(summary.value("took_over_from", ""),
            std::string("host ") + host + " pid " + std::to_string(first.pid()))
      << summary.dump(2);
  EXPECT_EQ(summary["workers_lost"], 0) << summary.dump(2);
  EXPECT_EQ(summary["steps_rolled_back"], 0) << summary.dump(2);
  EXPECT_EQ(summary["membership_epoch"], 0) << summary.dump(2);
  // Without a coordinator from the kill to the --resume: at least the 30 steps waited for above.
  EXPECT_GT(summary.value("coordinator_takeover_seconds", -1.0), 0.0) << summary.dump(2);
  std::set<pid_t> pids;
  for (const auto& r : summary["per_rank"]) pids.insert(r.value("pid", 0));
  EXPECT_EQ(pids, (std::set<pid_t>{p0, p1})) << summary.dump(2);
  expect_every_sample_once(summary, 2);
  EXPECT_EQ(last_step(first.run()), summary["steps"].get<long>());
  const std::vector<json> events = read_events(first.run());
  const json* took = find_event(events, "coordinator_took_over");
  ASSERT_NE(took, nullptr);
  EXPECT_EQ((*took)["readopted"], true);
  EXPECT_EQ(find_event(events, "worker_started", [&](const json& e) {
              return e.value("time", 0.0) > (*took)["time"].get<double>();
            }),
            nullptr)
      << "the new coordinator started a worker";
  for (const char* gone : {"store.journal", "coordinator.json", "token"})
    EXPECT_FALSE(fs::exists(first.run() / gone)) << gone << " outlived the job";
  fs::remove_all(dir);
}

// Nobody starts the coordinator again: the workers give up after elastic.coordinator_wait_s, and
// a --resume afterwards finds no worker and restarts from the checkpoints.
TEST(Elastic, WorkersWithoutACoordinatorGiveUpAfterTheirWait) {
  auto dir = fresh_dir("no-coordinator");
  Launcher first(dir, {"workers=2", "train.epochs=3", "checkpoint.every_steps=20",
                       "elastic.heartbeat_s=0.2", "elastic.failure_timeout_s=2",
                       "elastic.coordinator_wait_s=4"});
  ASSERT_TRUE(first.wait_until([&] { return last_step(first.run()) >= 40; }, 180s))
      << first.output();
  const pid_t p0 = first.worker_pid(0), p1 = first.worker_pid(1);
  ASSERT_EQ(kill(first.pid(), SIGKILL), 0);
  first.wait_exit(10s);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(first.wait_until([&] { return ended(p0) && ended(p1); }, 60s))
      << "workers still run a minute after their coordinator died";
  const auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(waited, 3s);
  EXPECT_LT(waited, 20s);
  std::ifstream log(first.run() / "logs" / "rank-0.log");
  const std::string text((std::istreambuf_iterator<char>(log)), {});
  EXPECT_NE(text.find("(elastic.coordinator_wait_s)"), std::string::npos) << text;

  Launcher again(dir, "again", {"--resume", first.run().string(), "--set", "train.epochs=1"});
  EXPECT_EQ(again.wait_exit(300s), 0) << again.output();
  EXPECT_NE(again.output().find("no worker of the job answered"), std::string::npos)
      << again.output();
  EXPECT_NE(again.output().find("resuming from"), std::string::npos) << again.output();
  fs::remove_all(dir);
}

// The store in etcd and no standby (coordinator.standby: none): the coordinator SIGKILLed, its
// workers train on while nobody leads the job, and exit once nobody has for
// elastic.coordinator_wait_s.
TEST(Elastic, WorkersOfAnEtcdJobThatNobodyLeadsExitAfterTheirWait) {
  auto dir = fresh_dir("etcd-leaderless");
  cohort::store::testing::EtcdCluster etcd(1);
  Launcher run(dir, {"workers=2", "train.epochs=5", "checkpoint.every_steps=0",
                     "elastic.heartbeat_s=0.2", "elastic.failure_timeout_s=2",
                     "elastic.coordinator_wait_s=3", "coordinator.store=" + etcd.url("jobs"),
                     "coordinator.standby=none"});
  ASSERT_TRUE(run.wait_until([&] { return last_step(run.run()) >= 40; }, 180s)) << run.output();
  const pid_t p0 = run.worker_pid(0), p1 = run.worker_pid(1);
  ASSERT_EQ(kill(run.pid(), SIGKILL), 0);
  run.wait_exit(10s);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(run.wait_until([&] { return ended(p0) && ended(p1); }, 60s))
      << "workers of a job nobody leads still run a minute later";
  // The lease (failure_timeout_s) runs out first, then the wait.
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 3s);
  std::ifstream log(run.run() / "logs" / "rank-1.log");
  const std::string text((std::istreambuf_iterator<char>(log)), {});
  EXPECT_NE(text.find("no coordinator has led the job"), std::string::npos) << text;
  fs::remove_all(dir);
}

// The store in etcd, no `cohort run --standby`: the coordinator SIGKILLed alone, one of its
// workers starts a standby coordinator (coordinator.standby: workers, the default), which takes the
// job over; the same workers finish it with nothing rolled back and every sample seen once. (Had
// they finished before the standby led, they would wait for it to collect their summaries.) Eight
// epochs: on a quiet machine two of the mlp's took 2.3 s, over before the kill.
TEST(Elastic, AWorkerStartsAStandbyForAnEtcdJobThatLostItsCoordinator) {
  auto dir = fresh_dir("etcd-worker-standby");
  cohort::store::testing::EtcdCluster etcd(1);
  Launcher run(dir, {"workers=2", "train.epochs=8", "train.seed=7", "checkpoint.every_steps=0",
                     "elastic.heartbeat_s=0.2", "elastic.failure_timeout_s=2",
                     "coordinator.store=" + etcd.url("jobs")});
  ASSERT_TRUE(run.wait_until([&] { return last_step(run.run()) >= 40; }, 180s)) << run.output();
  const pid_t p0 = run.worker_pid(0), p1 = run.worker_pid(1);
  ASSERT_EQ(kill(run.pid(), SIGKILL), 0);
  run.wait_exit(10s);
  // The standby's run directory, once its summary is there.
  fs::path standby;
  ASSERT_TRUE(run.wait_until(
      [&] {
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(run.run(), ec)) {
          if (e.path().filename().string().starts_with("standby-r") &&
              fs::exists(e.path() / "summary.json")) {
            standby = e.path();
            return true;
          }
        }
        return false;
      },
      300s))
      << "no standby finished the job";
  EXPECT_TRUE(run.wait_until([&] { return ended(p0) && ended(p1); }, 30s));
  const json summary = read_json(standby / "summary.json");
  EXPECT_EQ(summary["status"], "completed") << summary.dump(2);
  EXPECT_NE(summary.value("took_over_from", "").find("pid " + std::to_string(run.pid())),
            std::string::npos)
      << summary.dump(2);
  EXPECT_EQ(summary["workers_lost"], 0) << summary.dump(2);
  EXPECT_EQ(summary["steps_rolled_back"], 0) << summary.dump(2);
  std::set<pid_t> pids;
  for (const auto& r : summary["per_rank"]) pids.insert(r.value("pid", 0));
  EXPECT_EQ(pids, (std::set<pid_t>{p0, p1})) << summary.dump(2);
  expect_every_sample_once(summary, 8);
  // Exactly one worker started one.
  int standbys = 0;
  for (const auto& e : fs::directory_iterator(run.run()))
    standbys += e.path().filename().string().starts_with("standby-r");
  EXPECT_EQ(standbys, 1);
  if (!HasFailure()) fs::remove_all(dir);
}

TEST(Elastic, WithoutElasticityALostWorkerFailsTheJobNamingIt) {
  auto dir = fresh_dir("strict");
  Launcher run(dir, {"workers=2", "train.epochs=1"});
  ASSERT_TRUE(run.wait_until([&] { return last_step(run.run()) >= 20; }, 120s)) << run.output();
  int victim = run.worker_pid(1);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(run.wait_exit(60s), 1) << run.output();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  auto s = read_json(run.run() / "summary.json");
  EXPECT_EQ(s["status"], "failed");
  const std::string error = s["error"];
  EXPECT_NE(error.find("rank 1"), std::string::npos) << error;
  EXPECT_NE(error.find("pid " + std::to_string(victim)), std::string::npos) << error;
  EXPECT_NE(error.find("min_workers"), std::string::npos) << error;
  fs::remove_all(dir);
}

TEST(Elastic, KilledLauncherResumesFromTheNewestCheckpointThatVerifies) {
  auto dir = fresh_dir("resume");
  Launcher run(dir,
               {"workers=2", "train.epochs=1", "checkpoint.every_steps=20", "checkpoint.keep=5"});
  auto ckpts = run.run() / "checkpoints";
  ASSERT_TRUE(run.wait_until([&] { return checkpoint_files(ckpts).size() >= 3; }, 120s))
      << run.output();
  // The launcher (coordinator) and its workers die (the machine's processes are gone).
  ASSERT_EQ(kill(-run.pid(), SIGKILL), 0);
  EXPECT_EQ(run.wait_exit(30s), 128 + SIGKILL);
  auto files = checkpoint_files(ckpts);
  ASSERT_GE(files.size(), 3u);
  // The newest is damaged on disk after the fact; a writer killed mid-write left its temporary.
  {
    std::fstream f(files.back(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(files.back()) / 2));
    char c = 0;
    f.read(&c, 1);
    f.seekp(-1, std::ios::cur);
    c = static_cast<char>(c ^ 0x10);
    f.write(&c, 1);
  }
  std::ofstream(ckpts / "ckpt-000000999999.cohort.tmp.4242") << "half a checkpoint";
  const auto& previous = files[files.size() - 2];
  const long previous_step = std::stol(previous.filename().string().substr(5, 12));

  auto r = cohort::e2e::sh(std::string(COHORT_BINARY) + " run --resume " + run.run().string() +
                           " --set train.max_steps=" + std::to_string(previous_step + 20));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resuming from " + previous.string()), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("skipped a checkpoint that does not verify"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(files.back().filename().string()), std::string::npos) << r.output;
  auto s = read_json(run.run() / "summary.json");
  EXPECT_EQ(s["status"], "completed");
  EXPECT_EQ(s["per_rank"][0]["resumed_from_step"], previous_step);
  EXPECT_EQ(s["steps"], previous_step + 20);
  auto events = read_events(run.run());
  const json* resumed = find_event(events, "resumed_from_checkpoint");
  ASSERT_NE(resumed, nullptr);
  EXPECT_EQ((*resumed)["step"], previous_step);
  EXPECT_EQ((*resumed)["skipped"].size(), 1u);
  fs::remove_all(dir);
}

}  // namespace
