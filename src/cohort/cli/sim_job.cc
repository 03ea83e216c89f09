#include "cohort/cli/sim_job.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "cohort/base/error.h"

namespace cohort::cli {

sim::Choice choice_of(const train::JobConfig& job) {
  sim::Choice c;
  c.algorithm = comm::parse_algorithm(job.comm.algorithm);
  c.transport = comm::parse_transport(job.comm.transport);
  c.bucket_mb = job.comm.bucket_mb;
  // As the trainer maps comm.* to the codecs' options (train/trainer_start.cc).
  compress::CompressionOptions& o = c.compression;
  o.method = compress::parse_method(job.comm.compression);
  o.error_feedback = job.comm.error_feedback;
  o.int8_chunk = static_cast<size_t>(job.comm.int8_chunk);
  o.int8_stochastic_rounding = job.comm.int8_stochastic_rounding;
  o.topk_ratio = job.comm.topk_ratio;
  o.topk_warmup_steps = job.comm.topk_warmup_steps;
  o.powersgd_rank = static_cast<int>(job.comm.powersgd_rank);
  o.min_bytes = static_cast<size_t>(job.comm.compression_min_kb * 1024);
  if (job.sync.uses_servers()) {
    // Parameter servers are not modelled: simulating the job as allreduce would answer another
    // question than the one asked.
    throw ConfigError("the simulator models sync.mode allreduce and local_sgd, not " +
                      std::string(train::sync_kind_name(job.sync.mode)) + " (parameter servers)");
  }
  c.sync = job.sync.mode == train::SyncKind::LocalSgd ? sim::SyncMode::LocalSgd : sim::SyncMode::Allreduce;
  c.period = static_cast<int>(job.sync.period);
  return c;
}

std::optional<sim::Profile> find_profile(const std::optional<std::string>& path) {
  if (path) return sim::read_profile(*path);
  if (std::filesystem::is_regular_file("profile.json")) return sim::read_profile("profile.json");
  return std::nullopt;
}

namespace {

// The number at the start of `text` and the rest of it.
double leading_number(const std::string& flag, const std::string& text, std::string* unit) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !(v > 0) || !std::isfinite(v)) {
    throw ConfigError("--" + flag + " " + text + ": expected a positive number with a unit");
  }
  *unit = std::string(end);
  return v;
}

}  // namespace

Bandwidth parse_bandwidth(const std::string& flag, const std::string& text) {
  std::string unit;
  const double v = leading_number(flag, text, &unit);
  static const struct {
    const char* name;
    double factor;
    bool bits;
  } units[] = {{"gbit", 1e9 / 8, true}, {"mbit", 1e6 / 8, true}, {"kbit", 1e3 / 8, true},
               {"bit", 1.0 / 8, true},  {"gbyte", 1e9, false},   {"mbyte", 1e6, false},
               {"kbyte", 1e3, false}};
  for (const auto& u : units) {
    if (unit == u.name) return {.bytes_per_s = v * u.factor, .in_bits = u.bits};
  }
  throw ConfigError("--" + flag + " " + text +
                    ": expected a bandwidth such as 25gbit, 100mbit or 1.25gbyte (per second)");
}

double parse_duration(const std::string& flag, const std::string& text) {
  std::string unit;
  const double v = leading_number(flag, text, &unit);
  static const std::pair<const char*, double> units[] = {
      {"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1.0}};
  for (const auto& [name, factor] : units) {
    if (unit == name) return v * factor;
  }
  throw ConfigError("--" + flag + " " + text + ": expected a time such as 5us, 0.2ms or 1s");
}

}  // namespace cohort::cli
