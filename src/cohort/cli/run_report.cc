#include "cohort/cli/run_report.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "cohort/base/file.h"
#include "cohort/base/json_number.h"
#include "cohort/base/process_state.h"
#include "cohort/cli/job_files.h"

namespace cohort::cli {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

void print_recoveries(const json& s) {
  if (s.value("recoveries", 0) > 0 || s.value("workers_lost", 0) > 0) {
    std::printf(
        "  recoveries        %d (slowest %.1f s, %ld steps rolled back), %d workers at the end\n",
        s.value("recoveries", 0), s.value("recovery_seconds_max", 0.0),
        s.value("steps_rolled_back", 0L), s.value("final_world_size", 0));
  }
}

}  // namespace

ProgressPrinter::ProgressPrinter() : tty_(::isatty(STDOUT_FILENO)) {}

void ProgressPrinter::record(const json& m) {
  long step = m.value("step", 0L), total = m.value("total_steps", 0L);
  double rate = m.value("samples_per_sec", 0.0), steps_per_sec = m.value("steps_per_sec", 0.0);
  double eta = steps_per_sec > 0 ? (total - step) / steps_per_sec : NAN;
  char line[256];
  std::snprintf(line, sizeof(line),
                "epoch %ld/%ld  step %ld/%ld  loss %.4f  %.0f samples/s  ETA %s",
                m.value("epoch", 0L) + 1, m.value("epochs", 1L), step, total,
                json_number(m, "loss", 0.0), rate, format_duration(eta).c_str());
  if (tty_) {
    int width = 24;
    int filled = total > 0 ? static_cast<int>(width * step / total) : 0;
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(static_cast<size_t>(width), '.');
    std::printf("\r[%s] %s\033[K", bar.c_str(), line);
  } else {
    std::printf("%s\n", line);
  }
  std::fflush(stdout);
  drawn_ = tty_;
}

void ProgressPrinter::end_line() {
  if (drawn_) std::printf("\n");
  drawn_ = false;
}

json aggregate_summary(const std::vector<json>& per_rank, const train::JobConfig& cfg,
                       double wall) {
  json s;
  s["status"] = "completed";
  s["name"] = cfg.name;
  s["world_size"] = per_rank.size();
  const json& r0 = per_rank.at(0);
  s["steps"] = r0.value("steps", 0L);
  s["epochs"] = r0.value("epochs", 0.0);
  s["test_accuracy"] = r0.value("test_accuracy", 0.0);
  s["test_loss"] = json_number(r0, "test_loss", 0.0);
  s["final_loss"] = json_number(r0, "final_loss", 0.0);
  s["epoch_samples"] = r0.value("epoch_samples", json::array());
  double train_seconds = 0, comm = 0, compute = 0;
  uint64_t samples = 0, bytes = 0, grad_sent = 0, grad_uncompressed = 0;
  for (const auto& r : per_rank) {
    samples += r.value("samples", 0UL);
    bytes += r.value("comm_bytes", 0UL);
    grad_sent += r.value("grad_bytes_sent", 0UL);
    grad_uncompressed += r.value("grad_bytes_uncompressed", 0UL);
    train_seconds = std::max(train_seconds, r.value("train_seconds", 0.0));
    comm += r.value("comm_seconds", 0.0);
    compute += r.value("compute_seconds", 0.0);
  }
  double n = static_cast<double>(per_rank.size());
  s["samples"] = samples;
  s["train_seconds"] = train_seconds;
  s["samples_per_sec"] = train_seconds > 0 ? samples / train_seconds : 0.0;
  s["wall_seconds"] = wall;
  s["comm_seconds"] = comm / n;        // mean over ranks of the time blocked on gradient exchange
  s["compute_seconds"] = compute / n;  // mean over ranks
  s["comm_bytes"] = bytes;             // sent by all ranks together
  s["compression"] = r0.value("compression", std::string("none"));
  // Gradient bytes an uncompressed f32 ring allreduce would have sent over those actually sent
  // (headers included), all ranks together; 1 when nothing was sent (one worker).
  s["compression_ratio"] = grad_sent ? static_cast<double>(grad_uncompressed) / grad_sent : 1.0;
  s["grad_bytes_sent"] = grad_sent;
  const auto steps = std::max<int64_t>(1, r0.value("steps", int64_t{0}));
  s["grad_bytes_per_step"] = static_cast<double>(grad_sent) / static_cast<double>(steps) /
                             static_cast<double>(per_rank.size());  // per worker
  // The transport probe (an allreduce timed at start-up): what this machine's transport reaches.
  s["probe_bytes"] = r0.value("probe_bytes", 0UL);
  s["probe_busbw_gbps"] = r0.value("probe_busbw_gbps", 0.0);
  s["per_rank"] = per_rank;
  return s;
}

// What a Python program's workers reported at their end (python/cohort/job.py): rank 0's view of
// the model, every rank's samples.
json python_summary(const std::vector<json>& per_rank, const train::JobConfig& cfg, double wall) {
  json s{{"name", cfg.name}, {"world_size", per_rank.size()}, {"wall_seconds", wall}};
  const json& r0 = per_rank.at(0);
  for (const char* key : {"steps", "final_loss", "test_accuracy", "test_loss"}) {
    if (r0.contains(key)) s[key] = r0[key];
  }
  double train_seconds = 0;
  uint64_t samples = 0;
  for (const auto& r : per_rank) {
    samples += r.value("samples", 0UL);
    train_seconds = std::max(train_seconds, r.value("train_seconds", 0.0));
  }
  if (samples > 0) {
    s["samples"] = samples;
    s["train_seconds"] = train_seconds;
    s["samples_per_sec"] = train_seconds > 0 ? samples / train_seconds : 0.0;
  }
  s["per_rank"] = per_rank;
  return s;
}

void print_report(const json& s, const std::string& run_dir) {
  double comm = s.value("comm_seconds", 0.0), compute = s.value("compute_seconds", 0.0);
  std::printf("\n%s: %ld workers, %ld steps, %.2f epochs in %s\n",
              s.value("status", std::string("?")).c_str(), s.value("world_size", 0L),
              s.value("steps", 0L), s.value("epochs", 0.0),
              format_duration(s.value("wall_seconds", 0.0)).c_str());
  std::printf("  test accuracy     %.4f\n", s.value("test_accuracy", 0.0));
  std::printf("  throughput        %.0f samples/s\n", s.value("samples_per_sec", 0.0));
  std::printf(
      "  time per worker   %.1f s computing, %.1f s waiting on gradient exchange (%.0f%%)\n",
      compute, comm, compute + comm > 0 ? 100.0 * comm / (compute + comm) : 0.0);
  std::printf("  bytes sent        %.1f MB (all workers)\n", s.value("comm_bytes", 0.0) / 1e6);
  print_recoveries(s);
  if (s.value("compression", std::string("none")) != "none") {
    std::printf("  compression       %s, %.1fx fewer gradient bytes than f32\n",
                s.value("compression", std::string()).c_str(), s.value("compression_ratio", 1.0));
  }
  std::printf("  run directory     %s\n", run_dir.c_str());
}

// A Python program's outcome: what its workers reported (cohort.report), if anything.
void print_python_report(const json& s, const std::string& run_dir) {
  std::printf("\n%s: %ld workers in %s\n", s.value("status", std::string("?")).c_str(),
              s.value("world_size", 0L), format_duration(s.value("wall_seconds", 0.0)).c_str());
  if (s.contains("per_rank")) {
    std::printf("  steps             %ld\n", s.value("steps", 0L));
    const json& r0 = s["per_rank"].at(0);
    if (r0.contains("final_loss"))
      std::printf("  final loss        %.4f\n", json_number(s, "final_loss", 0.0));
    if (r0.contains("test_accuracy")) {
      std::printf("  test accuracy     %.4f\n", s.value("test_accuracy", 0.0));
    }
    if (s.value("samples", 0L) > 0) {
      std::printf("  throughput        %.0f samples/s\n", s.value("samples_per_sec", 0.0));
    }
  }
  print_recoveries(s);
  std::printf("  run directory     %s\n", run_dir.c_str());
}

std::string tail_of(const fs::path& p, size_t max_bytes) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  auto size = static_cast<size_t>(in.tellg());
  size_t start = size > max_bytes ? size - max_bytes : 0;
  in.seekg(static_cast<std::streamoff>(start));
  std::string s(size - start, '\0');
  in.read(s.data(), static_cast<std::streamsize>(s.size()));
  return s;
}

// What the launcher can see of a worker that did not answer a request for its flight record.
std::string process_note(elastic::ChildProcess& w) {
  const std::string pid = "pid " + std::to_string(w.pid());
  if (auto st = w.poll()) return "its process " + pid + " " + st->describe();
  const char state = process_state(w.pid());
  if (state == 'T' || state == 't') return pid + " is stopped (SIGSTOP or a debugger)";
  if (state == 'D') return pid + " is blocked in the kernel (uninterruptible sleep)";
  if (state == 'Z') return pid + " has exited";
  return pid + " is running but did not answer";
}

// Collects every rank's flight record, writes hang-report.txt and prints the diagnosis.
void report_hang(trace::HangWatch& watch, std::map<int, elastic::ChildProcess>& workers,
                 const fs::path& run_dir, EventLog& events, const std::string& cause) {
  auto ranks = watch.collect(std::chrono::seconds(3));
  for (size_t r = 0; r < ranks.size(); ++r) {
    auto w = workers.find(static_cast<int>(r));
    if (!ranks[r].report && w != workers.end()) ranks[r].note = process_note(w->second);
  }
  trace::HangDiagnosis d = trace::diagnose_hang(ranks);
  write_file_atomically(run_dir / "hang-report.txt", cause + "\n\n" + d.text());
  events.write({{"event", "hang_report"},
                {"cause", cause},
                {"diagnosis", d.headline},
                {"ranks", d.culprits},
                {"collective", d.stuck_seq}});
  std::fprintf(stderr, "\ncohort: %s\ncohort: diagnosis: %s\ncohort: details in %s\n",
               cause.c_str(), d.headline.c_str(), (run_dir / "hang-report.txt").c_str());
  std::fflush(stderr);
}

}  // namespace cohort::cli
