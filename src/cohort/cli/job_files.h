// Files of a run directory written by the launcher.
#pragma once

#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

namespace cohort::cli {

// events.jsonl: one JSON object per line, each stamped with the wall-clock time.
class EventLog {
 public:
  explicit EventLog(const std::filesystem::path& path);
  void write(nlohmann::json event);

 private:
  std::mutex mu_;
  std::ofstream out_;
};

}  // namespace cohort::cli
