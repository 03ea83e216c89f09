// Files of a run directory written by the launcher.
#pragma once

#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

namespace cohort::cli {

// events.jsonl: one JSON object per line, each stamped with the wall-clock time.
class EventLog {
 public:
  explicit EventLog(const std::filesystem::path& path);
  void write(nlohmann::json event);
  // Called with every event written from now on (the live console shows them).
  void set_listener(std::function<void(const nlohmann::json&)> listener);

 private:
  std::mutex mu_;
  std::ofstream out_;
  std::function<void(const nlohmann::json&)> listener_;
};

// The job token: from `path` if it exists (refused if anybody but its owner can read it), else
// fresh random bytes, written to `path` (0600) when one is given so that workers started
// elsewhere can read it.
std::string job_token(const std::string& path);

// A duration as the terminal shows it: "m:ss" or "h:mm:ss"; "--:--" when unknown (NaN, < 0).
std::string format_duration(double seconds);

}  // namespace cohort::cli
