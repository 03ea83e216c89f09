// `cohort logs RUN_DIR`: the launcher's log (logs/launcher.log) and every rank's
// (logs/rank-N.log) merged in time order.
//
// Each line starts with its time (log.h: "2026-11-30T09:30:32.123 I [r2 e0 s41] ..."). A line
// without a time (a stack trace, a library's own output) stays with the line before it in its file.
// Lines with the same time keep the order of their files (launcher first, then by rank). Lines a
// worker wrote before it knew its rank carry "[-]" like the launcher's: they are shown as
// "[rN]", from the file they came from.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace cohort::trace {

// Throws Error when run_dir has no logs/ directory. `rank`: only that rank's lines.
std::vector<std::string> merge_logs(const std::string& run_dir, std::optional<int> rank = {});

// Whether `path` is a run directory (a directory with a logs/ subdirectory).
bool is_run_dir(const std::string& path);

}  // namespace cohort::trace
