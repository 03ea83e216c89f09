#include "cohort/dist/hang_reports.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "cohort/base/file.h"
#include "cohort/dist/c10d_store.h"

namespace cohort::dist {

namespace {

constexpr const char* kDebugPrefix = "cohort/debug";

std::string report_path(int rank) {
  if (const char* dir = std::getenv("COHORT_RUN_DIR"); dir && *dir) {
    return (std::filesystem::path(dir) / "hang-report.txt").string();
  }
  if (const char* path = std::getenv("COHORT_HANG_REPORT"); path && *path) return path;
  return (std::filesystem::temp_directory_path() /
          ("cohort-hang-report-rank" + std::to_string(rank) + "-" + std::to_string(::getpid()) +
           ".txt"))
      .string();
}

}  // namespace

HangReports::HangReports(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                         std::shared_ptr<comm::FlightRecorder> recorder)
    : store_(std::make_unique<C10dStore>(store)),
      rank_(rank),
      size_(size),
      recorder_(std::move(recorder)),
      // Its own connection: it waits on the store once a second, which would hold up every other
      // use of a shared TCPStore client.
      reporter_(std::make_unique<trace::FlightReporter>(
          std::make_unique<C10dStore>(second_connection(store)), kDebugPrefix, *recorder_, rank)) {}

HangReports::~HangReports() = default;

std::string HangReports::on_timeout(const std::string& error) {
  if (reported_.exchange(true)) return "";
  try {
    // Its thread would answer the next request for reports with a snapshot that is not final.
    reporter_.reset();
    trace::publish_final_report(*store_, kDebugPrefix, *recorder_, error, /*timed_out=*/true);
    trace::HangWatch watch(*store_, kDebugPrefix, size_, 0);
    std::vector<trace::RankInfo> ranks = watch.collect(std::chrono::seconds(3));
    ranks.at(static_cast<size_t>(rank_)).error = error;
    const trace::HangDiagnosis diagnosis = trace::diagnose_hang(ranks);
    const std::string path = report_path(rank_);
    write_file_atomically(path, diagnosis.text());
    spdlog::error("rank {}: {}; hang report: {}", rank_, diagnosis.headline, path);
    return path;
  } catch (const std::exception& e) {
    spdlog::warn("rank {}: no hang report: {}", rank_, e.what());
    return "";
  }
}

}  // namespace cohort::dist
