// Files that are never seen half-written.
#pragma once

#include <filesystem>
#include <string>

namespace cohort {

// Writes `content` to a temporary file beside `path`, fsyncs it, renames it over `path` and
// fsyncs the directory: a reader (or a process restarted after a crash) sees the old file or the
// new one, never a torn one. Throws SystemError naming the file.
void write_file_atomically(const std::filesystem::path& path, const std::string& content);

// Reads a whole file; throws SystemError naming it.
std::string read_file(const std::filesystem::path& path);

}  // namespace cohort
