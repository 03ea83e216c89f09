// Logging: spdlog with a pattern that carries time, rank, membership epoch and step on every line.
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace cohort::log {

// Sets the process-wide context printed on every line ("rank 3 epoch 1 step 42").
// rank < 0 means "not a worker" (launcher, coordinator, tools).
void set_context(int rank, int epoch = 0, long step = -1);
void set_step(long step);
void set_epoch(int epoch);
// Initialises the default logger once (stderr, level from COHORT_LOG_LEVEL, default info).
void init(const std::string& process_name = "cohort");
// Also writes every line of the default logger to `path` (appending), with the same pattern.
void add_file(const std::string& path);

}  // namespace cohort::log
