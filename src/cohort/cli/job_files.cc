#include "cohort/cli/job_files.h"

#include <cerrno>

#include "cohort/base/clock.h"
#include "cohort/base/error.h"

namespace cohort::cli {

EventLog::EventLog(const std::filesystem::path& path) : out_(path, std::ios::app) {
  if (!out_) throw SystemError("open " + path.string(), errno);
}

void EventLog::write(nlohmann::json event) {
  event["time"] = wall_seconds();
  std::lock_guard lk(mu_);
  out_ << event.dump() << "\n";
  out_.flush();
  if (listener_) listener_(event);
}

void EventLog::set_listener(std::function<void(const nlohmann::json&)> listener) {
  std::lock_guard lk(mu_);
  listener_ = std::move(listener);
}

}  // namespace cohort::cli
