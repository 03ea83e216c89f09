// What the simulator takes from a job file: its configuration as a sim::Choice, and where
// `cohort calibrate` writes and `cohort simulate` and `cohort diagnose` look for a profile.
#pragma once

#include <optional>
#include <string>

#include "cohort/sim/profile.h"
#include "cohort/sim/step.h"
#include "cohort/train/config.h"

namespace cohort::cli {

sim::Choice choice_of(const train::JobConfig& job);

// The profile at `path`, else ./profile.json when it exists; nullopt when neither is given or
// there. Throws ConfigError for a profile that is malformed.
std::optional<sim::Profile> find_profile(const std::optional<std::string>& path);

// A bandwidth ("25gbit", "100mbit", "1.5gbit", "10gbyte") in bytes per second, and whether it
// was given in bits (a line rate, as links are quoted); a time ("5us", "1.5ms", "20ns", "0.1s")
// in seconds; ConfigError naming the flag otherwise.
struct Bandwidth {
  double bytes_per_s = 0;
  bool in_bits = false;
};
Bandwidth parse_bandwidth(const std::string& flag, const std::string& text);
double parse_duration(const std::string& flag, const std::string& text);

}  // namespace cohort::cli
