// A job whose coordinator died while its workers train on (the embedded store): `cohort run
// --resume RUN_DIR` starts a coordinator that serves the job's keys from the store's journal
// where the old one listened, takes the job over, and re-adopts the workers that still run, with
// their in-memory state, instead of restarting them from a checkpoint. What it needs is in the run
// directory, written by the coordinator while the job runs and removed when the job ends:
//   coordinator.json  where the coordinator listens, which process it is, the job token's file
//   store.journal     the store's keys (store/journal.h)
//   token             the job token (0600), when no --token-file named one
// Workers started by `cohort run` on this machine outlive it for this (they train on without a
// coordinator up to elastic.coordinator_wait_s); those of a Python program or of a job with
// parameter servers still end with it, and such a job resumes from its checkpoints.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "cohort/base/clock.h"
#include "cohort/elastic/coordinator.h"

namespace cohort::cli {

struct CoordinatorRecord {
  std::string host;
  long pid = 0;
  std::string bind;
  uint16_t port = 0;
  std::string token_file;

  // nullopt when the run directory has none; Error naming the file when it cannot be read.
  static std::optional<CoordinatorRecord> read(const std::filesystem::path& run_dir);
  void write(const std::filesystem::path& run_dir) const;
  // "host H pid P".
  std::string describe() const;
};

std::filesystem::path journal_path(const std::filesystem::path& run_dir);
std::filesystem::path record_path(const std::filesystem::path& run_dir);

// The coordinator of the job in `run_dir` whose workers may still run: its record, when both the
// record and the journal are there. Error when that coordinator is still running on this machine.
std::optional<CoordinatorRecord> orphaned_job(const std::filesystem::path& run_dir);

// A coordinator that took a job over: waits up to `timeout` for a member's heartbeat. False when
// none came (its workers are gone), at once when every member ran on this machine and none of
// those processes is left.
bool workers_still_run(elastic::Coordinator& coordinator, Millis timeout);

}  // namespace cohort::cli
