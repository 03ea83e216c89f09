// `cohort bench allreduce`: measures Cohort's allreduce across N local processes.
//
// The launcher (this process) starts a StoreServer on 127.0.0.1 (--bind) with a fresh random
// token and spawns N ranks of the same binary (hidden --worker-rank flag; the token travels in the
// environment), each in the network namespace of its host under --hosts. Each rank builds a
// TcpStore and a Communicator and runs the method of bench_method.h; rank 0 posts one result per
// size to the store and the launcher prints it.
//
// Process hygiene: ranks die with the launcher (PR_SET_PDEATHSIG) and ignore SIGINT, so that a
// Ctrl-C reaches the launcher only, which then kills and reaps every rank. When a rank fails, the
// launcher gives the others until the collective timeout (plus a margin) to fail on their own, so
// that every rank's error is reported, then kills what is left and exits non-zero with the first
// failure.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "cohort/base/checksum.h"
#include "cohort/base/clock.h"
#include "cohort/base/cpu_binding.h"
#include "cohort/base/error.h"
#include "cohort/base/process_state.h"
#include "cohort/cli/args.h"
#include "cohort/cli/bench_worker.h"
#include "cohort/cli/commands.h"
#include "cohort/comm/transport/shm_pair.h"
#include "cohort/store/tcp_store.h"

extern char** environ;

namespace cohort::cli {
namespace {

constexpr const char* kUsage =
    "usage: cohort bench allreduce [options]\n"
    "\n"
    "Measures allreduce (float32, sum) across local processes on this host.\n"
    "\n"
    "  --ranks N          number of processes, 1 to 1024 (default 2)\n"
    "  --sizes LIST       message sizes in bytes, K/M/G suffixes are binary\n"
    "                     (default 4K,64K,1M,16M,64M)\n"
    "  --algo NAME        ring | halving_doubling | recursive_doubling | hierarchical | linear |\n"
    "                     auto (default auto)\n"
    "  --iters K          timed iterations per size (default: enough for ~0.5 s, 10..10000)\n"
    "  --warmup W         warm-up iterations per size (default 5)\n"
    "  --timeout MS       deadline of setup and of every collective (default 30000)\n"
    "  --chunk BYTES      pipeline segment size (CommConfig::chunk_bytes, default 256K)\n"
    "  --socket-buffer BYTES  SO_SNDBUF/SO_RCVBUF of data connections, 0: kernel autotuning\n"
    "                     (CommConfig::socket_buffer_bytes, default 1M)\n"
    "  --remote-socket-buffer BYTES  the same for connections between ranks of different\n"
    "                     hosts (CommConfig::remote_socket_buffer_bytes, default 0)\n"
    "  --ring-window K    ring segments per step and round (CommConfig::ring_window,\n"
    "                     default 1; 0: a whole block per step)\n"
    "  --transport NAME   auto | tcp | shm: what carries the ranks' pairs (CommConfig::transport,\n"
    "                     default auto: shared memory)\n"
    "  --integrity NAME   none | hmac | gmac: how data frames are authenticated\n"
    "                     (CommConfig::integrity, default none)\n"
    "  --single-copy BYTES  frames of at least this size between ranks of one host are read\n"
    "                     out of the sender's memory, copied once (CommConfig::\n"
    "                     shm_single_copy_bytes, default 0: always through the ring)\n"
    "  --fold BYTES       received segments of at least this size between ranks of one host\n"
    "                     are reduced straight out of the ring (CommConfig::shm_fold_bytes,\n"
    "                     default 64K; 0: copied out first)\n"
    "  --spin-us US       how long a small operation polls before it sleeps\n"
    "                     (CommConfig::spin_wait, default 20; 0: never)\n"
    "  --yield-us US      with more ranks than CPUs, how long a wait polls and yields the CPU\n"
    "                     before it sleeps (CommConfig::yield_wait, default 100; 0: never)\n"
    "  --bind-to WHAT     auto | none: auto binds each rank to its own share of the CPUs this\n"
    "                     command may use when there are at most as many ranks as CPUs, as\n"
    "                     mpirun does by default (default auto)\n"
    "  --json             one JSON object per line instead of a table\n"
    "  --hosts NS@ADDR,...  spread the ranks over these hosts of an emulated cluster\n"
    "                     (scripts/netcluster.sh), in contiguous blocks: each rank enters network\n"
    "                     namespace NS and listens on ADDR there (needs root)\n"
    "  --bind ADDR        where the launcher's store listens (default 127.0.0.1); with --hosts,\n"
    "                     an address of the launcher's namespace that the hosts reach\n"
    "\n"
    "Time is the median over iterations of the slowest rank's time; algbw = bytes / time and\n"
    "busbw = algbw * 2(n-1)/n, in GB/s (1e9 bytes per second).\n";

const std::set<std::string> kValueFlags = {
    "ranks", "sizes", "algo", "iters", "warmup", "timeout", "chunk", "socket-buffer",
    "remote-socket-buffer", "ring-window", "spin-us", "yield-us", "single-copy", "fold",
    "transport", "integrity", "hosts", "bind", "bind-to",
    // hidden: a rank spawned by the launcher, and the fault drills of the fault tests
    "worker-rank", "store", "host-cpus", "fault", "fault-rank", "fault-after-iters"};
const std::set<std::string> kBoolFlags = {"json", "help"};

// "NS@ADDR,NS@ADDR,..." of --hosts; at most one host per rank.
std::vector<BenchHost> parse_hosts(const std::string& list, int ranks) {
  std::vector<BenchHost> hosts;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto at = item.find('@');
    if (at == std::string::npos || at == 0 || at + 1 == item.size() ||
        item.find('/') != std::string::npos) {
      throw ConfigError("--hosts: '" + item + "' is not NAMESPACE@ADDRESS");
    }
    hosts.push_back({item.substr(0, at), item.substr(at + 1)});
  }
  if (hosts.empty() || static_cast<int>(hosts.size()) > ranks) {
    throw ConfigError("--hosts: " + std::to_string(hosts.size()) + " hosts for " +
                      std::to_string(ranks) + " ranks (1 to --ranks)");
  }
  return hosts;
}

BenchOptions parse_options(const Args& a) {
  BenchOptions o;
  auto int_in = [&](const std::string& flag, long fallback, long lo, long hi) {
    long v = a.get_int(flag, fallback);
    if (v < lo || v > hi) {
      throw ConfigError("--" + flag + " must be between " + std::to_string(lo) + " and " +
                        std::to_string(hi) + ", got " + std::to_string(v));
    }
    return static_cast<int>(v);
  };
  o.ranks = int_in("ranks", 2, 1, 1024);
  try {
    o.sizes = bench::parse_sizes(a.get_or("sizes", "4K,64K,1M,16M,64M"), sizeof(float));
  } catch (const std::invalid_argument& e) {
    throw ConfigError(std::string("--sizes: ") + e.what());
  }
  for (uint64_t b : o.sizes) {
    if (b > (4ull << 30)) throw ConfigError("--sizes: " + std::to_string(b) + " is above 4G");
  }
  o.algorithm = comm::parse_algorithm(a.get_or("algo", "auto"));
  o.method.iters = int_in("iters", 0, 0, 10000000);
  o.method.warmup = int_in("warmup", 5, 0, 1000000);
  o.timeout = std::chrono::milliseconds(int_in("timeout", 30000, 1, 24 * 3600 * 1000));
  auto bytes_in = [&](const std::string& flag, uint64_t lo, uint64_t hi) {
    uint64_t v;
    try {
      v = bench::parse_size(*a.get(flag));
    } catch (const std::invalid_argument& e) {
      throw ConfigError("--" + flag + ": " + e.what());
    }
    if (v < lo || v > hi) {
      throw ConfigError("--" + flag + " must be between " + std::to_string(lo) + " and " +
                        std::to_string(hi) + " bytes, got " + std::to_string(v));
    }
    return v;
  };
  if (a.has("chunk")) o.chunk_bytes = bytes_in("chunk", 1, uint64_t{1} << 30);
  if (a.has("socket-buffer")) {
    o.socket_buffer_bytes = static_cast<long>(bytes_in("socket-buffer", 0, uint64_t{1} << 30));
  }
  if (a.has("remote-socket-buffer")) {
    o.remote_socket_buffer_bytes =
        static_cast<long>(bytes_in("remote-socket-buffer", 0, uint64_t{1} << 30));
  }
  if (a.has("ring-window")) o.ring_window = int_in("ring-window", 0, 0, 1 << 20);
  if (a.has("spin-us")) o.spin_us = int_in("spin-us", 0, 0, 1000000);
  if (a.has("yield-us")) o.yield_us = int_in("yield-us", 0, 0, 1000000);
  if (a.has("single-copy")) {
    o.single_copy_bytes = static_cast<long>(bytes_in("single-copy", 0, uint64_t{1} << 30));
  }
  if (a.has("fold")) o.fold_bytes = static_cast<long>(bytes_in("fold", 0, uint64_t{1} << 30));
  o.transport = comm::parse_transport(a.get_or("transport", "auto"));
  o.integrity = comm::parse_integrity(a.get_or("integrity", "none"));
  o.json = a.has("json");
  o.bind_host = a.get_or("bind", "127.0.0.1");
  o.bind_to_cpus = bind_to_cpus(a);
  o.host_cpus = int_in("host-cpus", 0, 0, CPU_SETSIZE);
  if (auto h = a.get("hosts")) o.hosts = parse_hosts(*h, o.ranks);
  if (auto f = a.get("fault")) {
    if (*f == "kill")
      o.fault.kind = FaultKind::Kill;
    else if (*f == "stop")
      o.fault.kind = FaultKind::Stop;
    else
      throw ConfigError("--fault must be kill or stop, got '" + *f + "'");
    o.fault.rank = int_in("fault-rank", 1, 0, o.ranks - 1);
    o.fault.after_iters = int_in("fault-after-iters", 0, 0, 1 << 30);
  }
  return o;
}

// --- signals -------------------------------------------------------------------------------

volatile sig_atomic_t g_signal = 0;
void on_signal(int sig) {
  g_signal = sig;
}

// Routes SIGINT and SIGTERM to a flag for the lifetime of the launcher.
class SignalGuard {
 public:
  SignalGuard() {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~SignalGuard() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

// --- rank processes ------------------------------------------------------------------------

struct Rank {
  int rank = 0;
  pid_t pid = -1;
  bool live = false;
  bool killed_by_launcher = false;
  int status = 0;
};

// Owns the rank processes: whatever happens, the destructor kills and reaps every one of them.
class RankProcesses {
 public:
  ~RankProcesses() {
    kill_all();
    reap_all();
    // A rank killed between creating a shared-memory segment and its peer opening it.
    comm::transport::ShmSegment::remove_orphans_of(::getpid());
  }

  // fork + exec of `exe`. Everything the child needs is prepared before fork(): the
  // launcher has threads, so the child may only make async-signal-safe calls until exec.
  // netns_fd >= 0: the child enters that network namespace first.
  // `cpus`, when not empty, is the set the child binds itself to before exec.
  void spawn(const std::string& exe, int rank, const std::vector<std::string>& args,
             const std::vector<std::string>& env, int netns_fd, const CpuMask& cpus) {
    std::vector<char*> argv, envp;
    for (const auto& s : args) argv.push_back(const_cast<char*>(s.c_str()));
    argv.push_back(nullptr);
    for (const auto& s : env) envp.push_back(const_cast<char*>(s.c_str()));
    envp.push_back(nullptr);
    const pid_t launcher = getpid();
    const std::string no_netns =
        "cohort bench: rank " + std::to_string(rank) + " could not enter its host's namespace\n";
    const std::string unbound =
        "cohort bench: warning: rank " + std::to_string(rank) + " could not be bound to its CPUs\n";
    sigset_t none;
    sigemptyset(&none);

    pid_t pid = fork();
    if (pid < 0) throw SystemError("fork of bench rank " + std::to_string(rank), errno);
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != launcher) _exit(127);  // the launcher died before prctl took effect
      signal(SIGINT, SIG_IGN);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      dup2(STDERR_FILENO, STDOUT_FILENO);  // stdout carries the launcher's results only
      if (netns_fd >= 0 && setns(netns_fd, CLONE_NEWNET) != 0) {
        [[maybe_unused]] auto n = write(STDERR_FILENO, no_netns.data(), no_netns.size());
        _exit(126);
      }
      if (cpus.apply() != 0) {
        [[maybe_unused]] auto n = write(STDERR_FILENO, unbound.data(), unbound.size());
      }
      execve(exe.c_str(), argv.data(), envp.data());
      _exit(127);
    }
    ranks_.push_back({.rank = rank, .pid = pid, .live = true});
  }

  // Collects exited ranks without blocking; returns them in the order they were seen.
  std::vector<Rank*> poll() {
    std::vector<Rank*> exited;
    for (auto& r : ranks_) {
      if (!r.live) continue;
      int st = 0;
      if (waitpid(r.pid, &st, WNOHANG) == r.pid) {
        r.live = false;
        r.status = st;
        exited.push_back(&r);
      }
    }
    return exited;
  }

  bool all_exited() const {
    for (const auto& r : ranks_) {
      if (r.live) return false;
    }
    return true;
  }

  // Whether every live rank is stopped (SIGSTOP): nothing left can make progress on its own.
  bool all_live_stopped() const {
    for (const auto& r : ranks_) {
      if (r.live && !is_stopped(r.pid)) return false;
    }
    return true;
  }

  void kill_all() {
    for (auto& r : ranks_) {
      if (!r.live) continue;
      r.killed_by_launcher = true;
      // SIGKILL ends a stopped process too. No SIGCONT first: a rank continued before the kill
      // lands runs for a moment, may see its peers gone and exit on its own, and is then
      // reported as failing by itself instead of as killed.
      kill(r.pid, SIGKILL);
    }
  }

  // Blocking, but only after kill_all(): SIGKILL cannot be caught, so each wait is short.
  void reap_all() {
    for (auto& r : ranks_) {
      if (!r.live) continue;
      int st = 0;
      while (waitpid(r.pid, &st, 0) < 0 && errno == EINTR) {
      }
      r.live = false;
      r.status = st;
    }
  }

  const std::vector<Rank>& ranks() const { return ranks_; }

 private:
  static bool is_stopped(pid_t pid) { return process_state(pid) == 'T'; }

  std::vector<Rank> ranks_;
};

// The network namespaces of --hosts, open (close-on-exec) for the children to enter.
class NamespaceFiles {
 public:
  explicit NamespaceFiles(const std::vector<BenchHost>& hosts) {
    for (const BenchHost& h : hosts) {
      const std::string path = "/run/netns/" + h.netns;
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) throw SystemError("--hosts: cannot open network namespace " + path, errno);
      fds_.push_back(fd);
    }
  }
  ~NamespaceFiles() {
    for (int fd : fds_) ::close(fd);
  }
  NamespaceFiles(const NamespaceFiles&) = delete;
  NamespaceFiles& operator=(const NamespaceFiles&) = delete;
  int fd(size_t host) const { return fds_[host]; }

 private:
  std::vector<int> fds_;
};

// cohort-comm beside this binary, unless this is it: the same commands without libtorch, which
// each of hundreds of ranks would otherwise load.
std::optional<std::string> comm_binary_beside() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return std::nullopt;
  const std::filesystem::path comm = self.parent_path() / "cohort-comm";
  if (comm == self || ::access(comm.c_str(), X_OK) != 0) return std::nullopt;
  return comm.string();
}

// What the ranks run: cohort-comm beside this binary, else this binary (cohort-comm itself once
// the launcher runs as it).
std::string rank_binary() {
  return comm_binary_beside().value_or("/proc/self/exe");
}

bool succeeded(const Rank& r) {
  return WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0;
}

std::string outcome(const Rank& r, store::Store& store) {
  std::string head = "rank " + std::to_string(r.rank);
  if (WIFSIGNALED(r.status)) {
    int sig = WTERMSIG(r.status);
    if (r.killed_by_launcher) return head + " did not finish and was killed by the launcher";
    return head + " was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  std::string why;
  try {
    if (store.check({bench_error_key(r.rank)})) {
      why = store::to_string(store.get(bench_error_key(r.rank)));
    }
  } catch (const std::exception&) {
  }
  if (!why.empty()) return why;
  return head + " exited with status " + std::to_string(WEXITSTATUS(r.status));
}

// --- output --------------------------------------------------------------------------------

class Printer {
 public:
  explicit Printer(const BenchOptions& o) : o_(o) {}

  void print(const std::string& json_line) {
    if (o_.json) {
      std::cout << json_line << std::endl;
      return;
    }
    auto j = nlohmann::json::parse(json_line);
    if (!header_) {
      std::printf(
          "allreduce  library=cohort  transport=%s  ranks=%d  algorithm=%s  dtype=f32  "
          "cpus/rank=%d\n",
          j.value("transport", std::string("?")).c_str(), o_.ranks,
          std::string(comm::algorithm_name(o_.algorithm)).c_str(), j.value("cpus_per_rank", 0));
      std::printf("%12s %14s %12s %12s %8s\n", "size", "time_us", "algbw_GB/s", "busbw_GB/s",
                  "iters");
      header_ = true;
    }
    std::printf("%12s %14.2f %12.3f %12.3f %8d\n",
                bench::human_bytes(j["bytes"].get<uint64_t>()).c_str(), j["time_us"].get<double>(),
                j["algbw_gbps"].get<double>(), j["busbw_gbps"].get<double>(),
                j["iters"].get<int>());
    std::fflush(stdout);
  }

 private:
  const BenchOptions& o_;
  bool header_ = false;
};

// `host_cpus` > 0: the ranks are bound to shares of that many CPUs (CommConfig::host_cpus).
std::vector<std::string> worker_args(const Args& a, int rank, const std::string& store,
                                     int host_cpus) {
  std::vector<std::string> args = {"cohort", "bench", "allreduce"};
  for (const auto& flag : kValueFlags) {
    if (flag == "worker-rank" || flag == "store" || flag == "host-cpus") continue;
    if (auto v = a.get(flag)) {
      args.push_back("--" + flag);
      args.push_back(*v);
    }
  }
  args.insert(args.end(), {"--worker-rank", std::to_string(rank), "--store", store});
  if (host_cpus > 0) args.insert(args.end(), {"--host-cpus", std::to_string(host_cpus)});
  return args;
}

// The CPUs of each rank: every rank of this launcher runs on this machine (the namespaces of
// --hosts included), so they share out the CPUs this process may use; none when oversubscribed.
std::vector<CpuMask> rank_cpus(const BenchOptions& o) {
  std::vector<CpuMask> masks(static_cast<size_t>(o.ranks));
  const std::vector<int> cpus = allowed_cpus();
  for (int r = 0; o.bind_to_cpus && r < o.ranks; ++r) {
    masks[static_cast<size_t>(r)] = CpuMask(cpu_share(cpus, r, o.ranks));
  }
  return masks;
}

int launch(const Args& a, const BenchOptions& o) {
  std::string token;
  {
    uint8_t raw[32];
    random_bytes(raw, sizeof(raw));
    token = to_hex(raw, sizeof(raw));
  }
  store::StoreServer server({.bind_host = o.bind_host, .port = 0, .token = token});
  const std::string endpoint = server.endpoint().str();
  store::TcpStore client(server.endpoint(), token, o.timeout);

  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    if (std::strncmp(*e, kBenchTokenEnv, std::strlen(kBenchTokenEnv)) != 0) env.push_back(*e);
  }
  env.push_back(std::string(kBenchTokenEnv) + "=" + token);

  SignalGuard signals;
  RankProcesses procs;
  // The hosts' namespaces, opened before any fork (the children may only call setns).
  NamespaceFiles netns(o.hosts);
  const std::string exe = rank_binary();
  const std::vector<CpuMask> cpus = rank_cpus(o);
  const int host_cpus = cpus.front().empty() ? 0 : allowed_cpu_count();
  for (int r = 0; r < o.ranks; ++r) {
    const int fd = o.hosts.empty() ? -1 : netns.fd(bench_host_of(o, r));
    procs.spawn(exe, r, worker_args(a, r, endpoint, host_cpus), env, fd,
                cpus[static_cast<size_t>(r)]);
  }

  Printer printer(o);
  size_t reported = 0;
  auto drain_results = [&] {
    while (reported < o.sizes.size() && client.check({bench_result_key(reported)})) {
      printer.print(store::to_string(client.get(bench_result_key(reported))));
      ++reported;
    }
  };

  std::vector<const Rank*> failed;  // in the order the launcher saw them exit
  std::optional<Deadline> grace;
  while (!procs.all_exited()) {
    if (g_signal) {
      int sig = g_signal;
      procs.kill_all();
      procs.reap_all();
      std::cerr << "cohort bench: interrupted by " << strsignal(sig) << "; all ranks stopped\n";
      return 128 + sig;
    }
    drain_results();
    for (Rank* r : procs.poll()) {
      if (succeeded(*r)) continue;
      failed.push_back(r);
      if (!grace) grace = Deadline::after(o.timeout + std::chrono::seconds(5));
    }
    if (grace && !procs.all_exited() && (grace->expired() || procs.all_live_stopped())) {
      procs.kill_all();
      procs.reap_all();
      for (const auto& r : procs.ranks()) {
        if (r.killed_by_launcher) failed.push_back(&r);
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  drain_results();

  if (!failed.empty()) {
    std::vector<std::string> lines;
    for (const Rank* r : failed) lines.push_back(outcome(*r, client));
    for (size_t i = 1; i < lines.size(); ++i) std::cerr << "cohort bench: " << lines[i] << "\n";
    throw Error(lines[0] + (failed.size() > 1
                                ? " (first of " + std::to_string(failed.size()) + " failed ranks)"
                                : ""));
  }
  if (reported != o.sizes.size()) {
    throw Error("rank 0 exited after reporting " + std::to_string(reported) + " of " +
                std::to_string(o.sizes.size()) + " sizes");
  }
  return 0;
}

}  // namespace

int bench_main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    (argc < 2 ? std::cerr : std::cout) << kUsage;
    return argc < 2 ? 2 : 0;
  }
  if (std::string(argv[1]) != "allreduce") {
    throw ConfigError("unknown benchmark '" + std::string(argv[1]) + "' (expected allreduce)");
  }
  Args a(argc - 1, argv + 1, kValueFlags, kBoolFlags);
  if (a.has("help")) {
    std::cout << kUsage;
    return 0;
  }
  if (!a.positionals().empty()) throw ConfigError("unexpected argument " + a.positionals()[0]);
  BenchOptions o = parse_options(a);
  if (auto rank = a.get("worker-rank")) {
    int r = static_cast<int>(a.get_int("worker-rank", -1));
    if (r < 0 || r >= o.ranks) throw ConfigError("--worker-rank out of range: " + *rank);
    return run_bench_worker(o, r, a.get_or("store", ""));
  }
  // The launcher forks every rank, and a fork copies the page tables of the process it forks:
  // from this binary, with libtorch mapped, 4 ms each on this 2-CPU machine, which with each
  // child's teardown of that copy spread 32 ranks' starts over 0.55 s. So the launcher is
  // cohort-comm too when it is there.
  if (const auto comm = comm_binary_beside()) {
    std::vector<char*> args{const_cast<char*>("cohort"), const_cast<char*>("bench")};
    for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
    args.push_back(nullptr);
    std::fflush(nullptr);
    ::execv(comm->c_str(), args.data());
    std::fprintf(stderr,
                 "cohort bench: warning: could not run %s (%s); launching from this binary\n",
                 comm->c_str(), std::strerror(errno));
  }
  return launch(a, o);
}

}  // namespace cohort::cli
