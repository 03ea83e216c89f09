// End to end: a network partition. Three workers of one job on two network namespaces joined by a
// veth pair: the coordinator and ranks 0 and 1 on one side, rank 2 on the other. Mid-training the
// link is set down. What "recovers" means here:
//   - the partition is detected and reported (`worker_lost` for rank 2 in events.jsonl);
//   - the isolated side does not keep training on its own: rank 2 cannot reach the coordinator's
//     store, so it cannot form a membership epoch of its own; it fails its collective, waits for
//     the coordinator up to elastic.coordinator_wait_s and exits with an error, and nothing it did
//     counts (it is in no summary);
//   - the majority side (min_workers: 2) rolls back to its last snapshot, goes on at world size 2
//     and finishes the job, every example of the epoch seen exactly once.
// The test needs root and `ip netns`; it skips otherwise. It creates its namespaces with names of
// its own (pid in the name) and removes them whatever happens; namespaces left by a test process
// that was killed are removed by the next run.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "shell.h"

namespace fs = std::filesystem;
using cohort::e2e::sh;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

const std::string kPrefix = "cohort-nt-";

std::vector<json> read_jsonl(const fs::path& p) {
  std::vector<json> out;
  std::ifstream in(p);
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

bool wait_until(const std::function<bool()>& cond, std::chrono::seconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

// A process started in a network namespace (`ip netns exec NS ...`, which execs the command, so
// the pid is the command's), in a process group of its own, output to a file.
class NsProcess {
 public:
  NsProcess(const std::string& ns, const std::vector<std::string>& cmd, const fs::path& log)
      : log_(log) {
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      std::vector<std::string> args = {"ip", "netns", "exec", ns};
      args.insert(args.end(), cmd.begin(), cmd.end());
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execvp("ip", argv.data());
      _exit(127);
    }
  }
  NsProcess(const NsProcess&) = delete;
  NsProcess& operator=(const NsProcess&) = delete;
  ~NsProcess() {
    if (pid_ > 0 && !reaped_) {
      kill(-pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  // The exit code (128 + signal), or -1 if it did not exit within `limit`.
  int wait_exit(std::chrono::seconds limit) {
    int st = 0;
    if (!wait_until([&] { return waitpid(pid_, &st, WNOHANG) == pid_; }, limit)) return -1;
    reaped_ = true;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
  std::string output() const {
    std::ifstream in(log_);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  }

 private:
  fs::path log_;
  pid_t pid_ = -1;
  bool reaped_ = false;
};

// Two namespaces A and B with a veth pair between them (10.77.0.1 in A, 10.77.0.2 in B). The
// addresses exist only inside the two namespaces. Removing a namespace removes its end of the
// pair, and with it the other end.
class Partitionable {
 public:
  Partitionable() {
    const std::string id = std::to_string(::getpid());
    a_ = kPrefix + id + "-a";
    b_ = kPrefix + id + "-b";
    veth_a_ = "cnt" + id + "a";  // interface names: at most 15 characters
    veth_b_ = "cnt" + id + "b";
  }
  ~Partitionable() { remove(); }
  // Empty on success, else what failed.
  std::string create() {
    created_ = true;
    for (const std::string& cmd :
         {"ip netns add " + a_, "ip netns add " + b_,
          "ip link add " + veth_a_ + " netns " + a_ + " type veth peer name " + veth_b_ +
              " netns " + b_,
          in_a("ip addr add 10.77.0.1/24 dev " + veth_a_), in_a("ip link set lo up"),
          in_a("ip link set " + veth_a_ + " up"), in_b("ip addr add 10.77.0.2/24 dev " + veth_b_),
          in_b("ip link set lo up"), in_b("ip link set " + veth_b_ + " up")}) {
      auto r = sh(cmd, 30);
      if (r.exit_code != 0) return cmd + ": " + r.output;
    }
    return {};
  }
  void remove() {
    if (!created_) return;
    sh("ip netns del " + a_, 30);
    sh("ip netns del " + b_, 30);
    created_ = false;
  }
  std::string in_a(const std::string& cmd) const { return "ip netns exec " + a_ + " " + cmd; }
  std::string in_b(const std::string& cmd) const { return "ip netns exec " + b_ + " " + cmd; }
  const std::string& a() const { return a_; }
  const std::string& b() const { return b_; }
  const std::string& veth_a() const { return veth_a_; }

  // Namespaces of this test left by a run that was killed (its pid is gone).
  static void remove_stale() {
    std::istringstream list(sh("ip netns list", 30).output);
    std::string name;
    while (list >> name) {
      if (name.rfind(kPrefix, 0) != 0) continue;
      auto pid = std::atol(name.substr(kPrefix.size()).c_str());
      if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
        sh("ip netns del " + name, 30);
      }
    }
  }

 private:
  std::string a_, b_, veth_a_, veth_b_;
  bool created_ = false;
};

std::string example(const std::string& name) {
  return std::string(COHORT_SOURCE_DIR) + "/examples/" + name;
}

TEST(NetworkPartition, IsolatedWorkerStopsAndTheMajorityFinishesTheJob) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to create network namespaces";
  if (sh("ip netns list", 30).exit_code != 0) GTEST_SKIP() << "`ip netns` is not available";
  Partitionable::remove_stale();
  Partitionable net;
  if (auto why = net.create(); !why.empty()) {
    GTEST_SKIP() << "cannot create network namespaces with a veth pair: " << why;
  }

  auto dir = fs::temp_directory_path() / ("cohort-netns-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path token = dir / "token", run_dir = dir / "run";
  {
    std::ofstream(token) << "netns-test-token-0123456789\n";
    fs::permissions(token, fs::perms::owner_read | fs::perms::owner_write);
  }
  const std::string port = "29517";  // the namespace is new: nothing else listens there
  std::vector<std::string> launch = {COHORT_BINARY,
                                     "run",
                                     example("fashion-mlp.yaml"),
                                     "--external-workers",
                                     "--bind",
                                     "10.77.0.1",
                                     "--port",
                                     port,
                                     "--token-file",
                                     token.string(),
                                     "--run-dir",
                                     run_dir.string()};
  for (const char* s :
       {"workers=3", "train.epochs=1", "train.seed=7", "checkpoint.every_steps=0",
        "elastic.min_workers=2", "elastic.heartbeat_s=0.2", "elastic.failure_timeout_s=1",
        "elastic.snapshot_every_steps=10", "comm.timeout_s=5", "elastic.coordinator_wait_s=5"}) {
    launch.push_back("--set");
    launch.push_back(s);
  }
  NsProcess launcher(net.a(), launch, dir / "launcher.txt");
  auto worker = [&](const std::string& ns, int rank, const std::string& bind) {
    return std::make_unique<NsProcess>(
        ns,
        std::vector<std::string>{COHORT_BINARY, "worker", "--join", "10.77.0.1:" + port, "--rank",
                                 std::to_string(rank), "--bind", bind, "--token-file",
                                 token.string()},
        dir / ("worker-" + std::to_string(rank) + ".txt"));
  };
  // The coordinator listens before the workers come; they retry their connection until it does.
  auto w0 = worker(net.a(), 0, "10.77.0.1");
  auto w1 = worker(net.a(), 1, "10.77.0.1");
  auto w2 = worker(net.b(), 2, "10.77.0.2");

  auto last_step = [&] {
    long step = 0;
    for (const auto& m : read_jsonl(run_dir / "metrics.jsonl")) step = m.value("step", step);
    return step;
  };
  // One epoch at three workers is 313 steps: cut the link mid-epoch.
  ASSERT_TRUE(wait_until([&] { return last_step() >= 40; }, 180s)) << launcher.output();
  auto cut = sh(net.in_a("ip link set " + net.veth_a() + " down"), 30);
  ASSERT_EQ(cut.exit_code, 0) << cut.output;

  // The isolated worker stops: its collective fails within comm.timeout_s, and without the
  // coordinator (elastic.coordinator_wait_s) it has no membership epoch to go on in.
  int isolated = w2->wait_exit(60s);
  EXPECT_NE(isolated, -1) << "the isolated worker kept running:\n" << w2->output();
  EXPECT_NE(isolated, 0) << w2->output();

  ASSERT_EQ(launcher.wait_exit(180s), 0) << launcher.output();
  EXPECT_EQ(w0->wait_exit(30s), 0) << w0->output();
  EXPECT_EQ(w1->wait_exit(30s), 0) << w1->output();

  auto events = read_jsonl(run_dir / "events.jsonl");
  bool lost2 = false;
  for (const auto& e : events) {
    if (e.value("event", "") == "worker_lost" && e.value("rank", -1) == 2) lost2 = true;
  }
  EXPECT_TRUE(lost2) << "no worker_lost event for the isolated rank 2";

  std::ifstream in(run_dir / "summary.json");
  json s = json::parse(in);
  EXPECT_EQ(s["status"], "completed") << s.dump(2);
  EXPECT_EQ(s["final_world_size"], 2) << s.dump(2);
  EXPECT_GE(s["recoveries"].get<int>(), 1) << s.dump(2);
  for (const auto& r : s["per_rank"]) {
    EXPECT_NE(r.value("rank", -1), 2) << "the isolated worker's result was counted";
  }
  // Every example of the epoch exactly once, across the partition: count, sum and sum of squares
  // of the example indices equal those of [0, 60000).
  const double n = 60000;
  ASSERT_EQ(s["epoch_samples"].size(), 1u) << s.dump(2);
  const json& e = s["epoch_samples"][0];
  EXPECT_EQ(e["samples"].get<double>(), n) << e.dump();
  EXPECT_EQ(e["id_sum"].get<double>(), n * (n - 1) / 2) << e.dump();
  EXPECT_EQ(e["id_sq_sum"].get<double>(), (n - 1) * n * (2 * n - 1) / 6) << e.dump();

  w0.reset();
  w1.reset();
  w2.reset();
  net.remove();
  EXPECT_EQ(sh("ip netns list", 30).output.find(net.a()), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
