// `cohort calibrate [JOB.yaml] [--out profile.json] [--steps N] [--rounds R] [--set k=v]...`: measures
// what the simulator needs (sim/profile.h) on this machine - its transports, its reduction and
// codec kernels, its cores - and, given a job, the job's compute from a short run of one worker
// with a timeline (forward, backward with each gradient's time, the optimizer, data loading).
#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <cmath>
#include <map>
#include <sstream>
#include <thread>

#include "cohort/base/error.h"
#include "cohort/base/file.h"
#include "cohort/base/host.h"
#include "cohort/cli/args.h"
#include "cohort/compress/blas_threads.h"
#include "cohort/elastic/process.h"
#include "cohort/sim/calibrate.h"
#include "cohort/train/config.h"
#include "cohort/train/models.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace cohort::cli {
namespace {

// DDP makes buckets no smaller than one gradient: this many MiB makes one per gradient (after the
// first, which DDP keeps at 1 MiB).
constexpr double kTinyBucketMb = 1e-6;

int usage(std::ostream& os, int code) {
  os << "usage: cohort calibrate [JOB.yaml] [--out profile.json] [--steps N] [--rounds R]\n"
        "                        [--set key=value]...\n\n"
        "Measures this machine's transports (latency and bandwidth over TCP and shared memory), its\n"
        "reduction and codec kernels and its cores, and with a job file the job's compute from a\n"
        "short run of one worker (forward, backward and when each gradient is ready, optimizer,\n"
        "data loading), and how it slows with every core busy, each the median of R rounds (3):\n"
        "the profile `cohort simulate` predicts with. Run it on a quiet machine.\n"
        "The profile is JSON (docs/simulate.md); --out defaults to profile.json.\n";
  return code;
}

double load_average() {
  double l[1] = {0};
  return getloadavg(l, 1) == 1 ? l[0] : -1;
}

std::string now_text() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", std::gmtime(&t));
  return buf;
}

// The model's gradients in the order backward produces them: the reverse of registration order,
// as DDP buckets them; rows x cols as DDP hands them to PowerSGD (first dimension by the rest).
std::vector<sim::Gradient> gradients_of(const train::JobConfig& job) {
  auto model = train::make_model(job.model, train::input_spec(job.data), job.train.seed);
  std::vector<sim::Gradient> out;
  for (const auto& item : model->named_parameters(/*recurse=*/true)) {
    const torch::Tensor& p = item.value();
    if (!p.requires_grad()) continue;
    const uint64_t numel = static_cast<uint64_t>(p.numel());
    const uint64_t rows = p.dim() >= 2 ? static_cast<uint64_t>(p.size(0)) : 1;
    out.push_back(sim::Gradient{.name = item.key(), .bytes = numel * 4, .rows = rows, .cols = numel / rows});
  }
  std::reverse(out.begin(), out.end());
  return out;
}

// The most ranks calibrate starts at once for the oversubscribed latency and its exponent.
constexpr int kMaxOversubscribedRanks = 256;

// The ranks whose 8-byte allreduce gives the oversubscribed exponent: eight per core (the
// farther from two per core, the less the fit depends on either measurement's noise), or as many
// as calibrate starts; none (0) where that is not more than two per core.
int exponent_ranks(int cores) {
  const int ranks = std::min(8 * cores, kMaxOversubscribedRanks);
  return ranks > 2 * cores ? ranks : 0;
}

// Median seconds per size of `cohort bench allreduce` with `ranks` processes of this host.
std::map<uint64_t, double> bench_times(comm::Transport transport, comm::Algorithm algo,
                                       const std::string& sizes, int ranks = 2) {
  const std::string out = (fs::temp_directory_path() / ("cohort-calibrate-bench-" + std::to_string(getpid()))).string();
  auto child = elastic::ChildProcess::spawn(
      {.executable = elastic::self_executable(),
       .args = {"bench", "allreduce", "--ranks", std::to_string(ranks), "--sizes", sizes, "--algo",
                std::string(comm::algorithm_name(algo)), "--transport",
                std::string(comm::transport_name(transport)), "--json"},
       .stdout_path = out,
       .stderr_path = out + ".err"});
  const auto status = child.wait_for(std::chrono::minutes(5));
  const std::string text = fs::exists(out) ? read_file(out) : "";
  const std::string err = fs::exists(out + ".err") ? read_file(out + ".err") : "";
  fs::remove(out);
  fs::remove(out + ".err");
  if (!status || !status->ok()) {
    throw Error("calibrate: cohort bench allreduce over " + std::string(comm::transport_name(transport)) + " " +
                (status ? status->describe() : std::string("did not end")) + ": " + err);
  }
  std::map<uint64_t, double> times;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] != '{') continue;
    const json j = json::parse(line);
    times[j.at("bytes").get<uint64_t>()] = j.at("time_us").get<double>() * 1e-6;
  }
  return times;
}

// A transport's latency and bandwidth, measured by the bench and fitted through the simulator.
sim::LinkCost measure_link(const sim::Profile& p, comm::Transport transport, double* spread) {
  // An 8-byte allreduce by recursive doubling of `ranks` processes.
  auto eight_bytes_s = [&](int ranks) {
    const auto t = bench_times(transport, comm::Algorithm::RecursiveDoubling, "8", ranks);
    if (!t.count(8)) throw Error("calibrate: the bench printed no time for 8 bytes");
    return t.at(8);
  };
  sim::LinkCost link;
  link.latency_s = eight_bytes_s(2);
  sim::Profile q = p;
  sim::LinkCost& in_q = transport == comm::Transport::Shm ? q.shm.emplace() : q.tcp;
  in_q = link;
  const auto large = bench_times(transport, comm::Algorithm::Ring, "4M,16M");
  std::vector<double> rates;
  for (const auto& [bytes, seconds] : large) {
    rates.push_back(sim::fit_bandwidth(q, transport, comm::Algorithm::Ring, bytes, seconds));
  }
  if (rates.size() != 2) throw Error("calibrate: the bench printed no times for 4 and 16 MiB");
  link.bytes_per_s = std::sqrt(rates[0] * rates[1]);
  *spread = std::abs(rates[0] - rates[1]) / link.bytes_per_s;
  // With twice as many ranks as cores (where that is more than two, and not too many to start)
  // the latency, then with more how its extra grows.
  if (const int ranks = 2 * p.cores; ranks > 2 && ranks <= kMaxOversubscribedRanks) {
    in_q = link;
    link.oversubscribed_latency_s = sim::fit_oversubscribed_latency(q, transport, ranks, eight_bytes_s(ranks));
  }
  if (const int ranks = exponent_ranks(p.cores); link.oversubscribed_latency_s > 0 && ranks > 0) {
    in_q = link;
    link.oversubscribed_exponent = sim::fit_oversubscribed_exponent(q, transport, ranks, eight_bytes_s(ranks));
  }
  return link;
}

std::string describe_link(const sim::LinkCost& l) {
  char b[128];
  std::snprintf(b, sizeof b, "%.1f us, %.2f GB/s", l.latency_s * 1e6, l.bytes_per_s / 1e9);
  std::string out = b;
  if (l.oversubscribed_latency_s > 0) {
    std::snprintf(b, sizeof b, ", %.1f us with twice as many ranks as cores (the wait's exponent %.2f)",
                  l.oversubscribed_latency_s * 1e6, l.oversubscribed_exponent);
    out += b;
  }
  return out;
}

// Runs `copies` one-worker runs of the job at once, each with a timeline; returns their timelines.
std::vector<json> traced_runs(const std::string& job_path, const train::JobConfig& job,
                              const std::vector<std::string>& sets, int64_t steps, int copies) {
  const fs::path base = fs::temp_directory_path() / ("cohort-calibrate-" + std::to_string(getpid()));
  struct Cleanup {
    fs::path d;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(d, ec);
    }
  } cleanup{base};
  fs::remove_all(base);
  fs::create_directories(base);
  char bucket[32];
  std::snprintf(bucket, sizeof bucket, "%g", kTinyBucketMb);
  std::cerr << "calibrate: running " << steps << " steps of " << job.name << " with one worker"
            << (copies == 1 ? "" : ", " + std::to_string(copies) + " runs at once") << "\n";
  std::vector<elastic::ChildProcess> children;
  for (int k = 0; k < copies; ++k) {
    const fs::path dir = base / ("run-" + std::to_string(k));
    std::vector<std::string> args = {"run", job_path};
    for (const std::string& s : sets) args.insert(args.end(), {"--set", s});
    for (const std::string& s :
         {std::string("workers=1"), std::string("trace.enabled=true"), "comm.bucket_mb=" + std::string(bucket),
          "train.max_steps=" + std::to_string(steps), std::string("train.epochs=1000"),
          std::string("train.eval_every_steps=0"), std::string("checkpoint.every_steps=0"),
          std::string("faults=[]"), std::string("sync.mode=allreduce"), std::string("sync.balance=off"),
          std::string("comm.compression=none"), std::string("dashboard.enabled=false"),
          std::string("debug.bandwidth_probe_mb=0")}) {
      args.insert(args.end(), {"--set", s});
    }
    args.insert(args.end(), {"--run-dir", dir.string()});
    const std::string log = (base / ("run-" + std::to_string(k) + ".out")).string();
    children.push_back(elastic::ChildProcess::spawn(
        {.executable = elastic::self_executable(), .args = args, .stdout_path = log, .stderr_path = log}));
  }
  std::vector<json> traces;
  for (int k = 0; k < copies; ++k) {
    const auto status = children[static_cast<size_t>(k)].wait_for(std::chrono::hours(2));
    const fs::path log = base / ("run-" + std::to_string(k) + ".out");
    if (!status || !status->ok()) {
      throw Error("calibrate: the run of " + job_path + " " +
                  (status ? status->describe() : std::string("did not end")) + ":\n" +
                  (fs::exists(log) ? read_file(log) : std::string()));
    }
    const fs::path trace = base / ("run-" + std::to_string(k)) / "trace" / "rank-0.json";
    if (!fs::exists(trace)) throw Error("calibrate: the run left no timeline at " + trace.string());
    traces.push_back(json::parse(read_file(trace)));
  }
  return traces;
}

// One worker's compute from a run alone, and how it slows when the host's cores are all busy.
// `rounds` times: a lone run, then as many lone workers at once as the cores hold, then twice as
// many; each round's slowdowns are against its own lone run, just before them, so that this
// machine's speed moving between runs (a virtual machine's does, by 15% within minutes) is not
// taken for a slowdown, and each figure is the median over the rounds.
// `rounds_text` says what each round measured, for the profile's sources.
sim::Compute measure_compute(const std::string& job_path, const train::JobConfig& job,
                             const std::vector<std::string>& sets, int64_t steps, int cores, int rounds,
                             std::string* rounds_text) {
  const int64_t skip = std::min<int64_t>(5, steps / 4);
  auto compute = [&](const json& t) {
    return sim::phase_median_s(t, "forward", skip) + sim::phase_median_s(t, "backward", skip);
  };
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const int threads = static_cast<int>(job.threads_per_worker);
  // As many lone workers at once as the cores hold: what sharing memory and caches costs compute,
  // without any communication in the way.
  const int full = cores / threads;
  std::vector<json> alone;
  std::vector<double> lone, shared, oversubscribed;  // per round
  for (int round = 0; round < rounds; ++round) {
    alone.push_back(traced_runs(job_path, job, sets, steps, 1).front());
    lone.push_back(compute(alone.back()));
    if (full < 2) continue;
    // The median of the workers that ran together, over their fair share of a core.
    auto together = [&](int copies, double fair) {
      std::vector<double> ratios;
      for (const json& t : traced_runs(job_path, job, sets, steps, copies)) {
        ratios.push_back(compute(t) / lone.back() / fair);
      }
      return median(ratios);
    };
    shared.push_back(together(full, 1));
    // Twice as many: each has half a core, so twice as long is the fair share.
    oversubscribed.push_back(together(2 * full, 2));
  }
  // The profile's compute: the lone run of the median speed.
  std::vector<std::pair<double, size_t>> by_speed;
  for (size_t k = 0; k < lone.size(); ++k) by_speed.emplace_back(lone[k], k);
  std::sort(by_speed.begin(), by_speed.end());
  sim::Compute c = sim::compute_from_trace(alone[by_speed[by_speed.size() / 2].second], gradients_of(job),
                                           kTinyBucketMb, skip);
  c.threads = threads;
  c.batch_per_worker = job.train.batch_size;
  if (full >= 2) {
    c.shared_slowdown = std::max(1.0, median(shared));
    c.oversubscribed_slowdown = std::max(1.0, median(oversubscribed) / c.shared_slowdown);
  }
  auto list = [](const std::vector<double>& v, double scale, const char* unit) {
    std::string out;
    for (double x : v) {
      char b[32];
      std::snprintf(b, sizeof b, "%s%.3g%s", out.empty() ? "" : ", ", x * scale, unit);
      out += b;
    }
    return out;
  };
  *rounds_text = "compute in " + std::to_string(rounds) + " rounds: a lone worker's forward and backward " +
                 list(lone, 1e3, " ms") + " (the profile has the median run's)";
  if (full >= 2) {
    *rounds_text += "; with every core busy " + list(shared, 1, "x") + ", twice as many workers " +
                    list(oversubscribed, 1, "x") +
                    " (over the fair share; each against its round's lone run, the profile has the medians)";
  }
  return c;
}

}  // namespace

int calibrate_main(int argc, char** argv) {
  Args args(argc, argv, {"out", "steps", "rounds", "set"}, {"help"});
  if (args.has("help")) return usage(std::cout, 0);
  if (args.positionals().size() > 1) return usage(std::cerr, 2);
  const std::string out = args.get_or("out", "profile.json");
  const long steps = args.get_int("steps", 40);
  if (steps < 12 || steps > 100000) throw ConfigError("--steps: expected at least 12 steps");
  const long rounds = args.get_int("rounds", 3);
  if (rounds < 1 || rounds > 100) throw ConfigError("--rounds: expected 1 to 100 rounds");
  std::optional<train::JobConfig> job;
  if (!args.positionals().empty()) {
    job = train::load_job_config(args.positionals()[0], {.overrides = args.all("set")});
    if (!job->program.python.empty()) {
      throw ConfigError(args.positionals()[0] +
                        ": calibrate measures Cohort's own models; a Python program's compute is its own");
    }
  }
  const double load = load_average();
  if (load >= 1.0) {
    std::cerr << "calibrate: warning: the 1-minute load average is " << load
              << "; figures measured on a busy machine are not this machine's\n";
  }
  sim::Profile p;
  p.name = (job ? job->name + " on " : std::string()) + host_name();
  p.cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::cerr << "calibrate: kernels, transports (tcp";
  p.reduce_bytes_per_s = sim::measure_reduce();
  double tcp_spread = 0, shm_spread = -1;
  p.tcp = measure_link(p, comm::Transport::Tcp, &tcp_spread);
  try {
    std::cerr << ", shm";
    double spread = 0;
    p.shm = measure_link(p, comm::Transport::Shm, &spread);
    shm_spread = spread;
  } catch (const std::exception& e) {
    std::cerr << " [no shared memory here: " << e.what() << "]";
  }
  std::cerr << ")\n";
  // Between hosts this machine has only loopback: the network is TCP's figures.
  p.network = p.tcp;
  std::string rounds_text;
  if (job) {
    p.compute = measure_compute(args.positionals()[0], *job, args.all("set"), steps, p.cores,
                                static_cast<int>(rounds), &rounds_text);
    p.has_compute = true;
    p.ranks_per_host = std::max(1, p.cores / p.compute.threads);
  }
  // Each codec's cost as a worker of the job pays it: PowerSGD's products on the worker's own
  // OpenBLAS threads, not on a pool as wide as the machine.
  compress::set_blas_threads(job ? static_cast<int>(job->threads_per_worker) : 1);
  p.codecs = sim::measure_codecs(job ? job->comm.topk_ratio : 0.01,
                                 job ? static_cast<int>(job->comm.powersgd_rank) : 4,
                                 job ? p.compute.gradients : std::vector<sim::Gradient>{});
  char src[256];
  std::snprintf(src, sizeof src,
                "measured by cohort calibrate on %s, %d cores, %s (1-minute load average %.2f); "
                "bandwidths at 4 and 16 MiB within %.0f%% (tcp)%s of each other",
                host_name().c_str(), p.cores, now_text().c_str(), load, tcp_spread * 100,
                shm_spread >= 0 ? (", " + std::to_string(static_cast<int>(shm_spread * 100)) + "% (shm)").c_str() : "");
  p.sources.push_back(src);
  if (p.tcp.oversubscribed_latency_s > 0) {
    const int more = exponent_ranks(p.cores);
    p.sources.push_back("oversubscribed latencies: an 8-byte allreduce (recursive doubling) of " +
                        std::to_string(2 * p.cores) + " ranks on the " + std::to_string(p.cores) +
                        " cores" +
                        (more > 0 ? ", their exponents from " + std::to_string(more) + " ranks"
                                  : std::string()) +
                        ", fitted through the simulator");
  }
  if (job) p.sources.push_back(rounds_text);
  p.sources.push_back(
      "network: this machine's loopback TCP (no other host to measure); cohort simulate --link and "
      "--link-latency give another");
  write_file_atomically(out, sim::profile_json(p));
  char line[512];
  std::snprintf(line, sizeof line,
                "tcp: %s; shm: %s; reduce %.2f GB/s per core\n", describe_link(p.tcp).c_str(),
                p.shm ? describe_link(*p.shm).c_str() : "none", p.reduce_bytes_per_s / 1e9);
  std::cout << line;
  if (job) {
    const sim::Compute& c = p.compute;
    std::snprintf(line, sizeof line,
                  "compute of one worker (%d thread%s, batch %lld): data %.2f ms, forward %.2f ms, backward "
                  "%.2f ms (%zu gradients, %.2f MB), optimizer %.2f ms; %.2fx with every core busy, %.2fx "
                  "more with two threads per core\n",
                  c.threads, c.threads == 1 ? "" : "s", static_cast<long long>(c.batch_per_worker), c.data_s * 1e3,
                  c.forward_s * 1e3, c.backward_s * 1e3, c.gradients.size(), c.gradient_bytes() / 1e6,
                  c.optimizer_s * 1e3, c.shared_slowdown, c.oversubscribed_slowdown);
    std::cout << line << rounds_text << "\n";
  }
  std::cout << "profile: " << out << "\n";
  return 0;
}

}  // namespace cohort::cli
