// Files that are never seen half-written.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>

namespace cohort {

// Writes `content` to a temporary file beside `path`, fsyncs it, renames it over `path` and
// fsyncs the directory: a reader (or a process restarted after a crash) sees the old file or the
// new one, never a torn one. The file is created with `mode` (less the umask). Throws
// SystemError naming the file.
void write_file_atomically(const std::filesystem::path& path, const std::string& content,
                           mode_t mode = 0644);

// Reads a whole file; throws SystemError naming it.
std::string read_file(const std::filesystem::path& path);

}  // namespace cohort
