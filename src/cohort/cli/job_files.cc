#include "cohort/cli/job_files.h"

#include <cerrno>
#include <cmath>
#include <cstdio>

#include "cohort/base/clock.h"
#include "cohort/base/error.h"
#include "cohort/base/secret.h"

namespace cohort::cli {

std::string job_token(const std::string& path) {
  if (!path.empty() && std::filesystem::exists(path)) return read_secret_file(path, "--token-file");
  std::string token = random_token();
  if (!path.empty()) write_secret_file(path, token);
  return token;
}

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

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "--:--";
  long t = static_cast<long>(s + 0.5);
  char buf[32];
  if (t >= 3600) {
    std::snprintf(buf, sizeof(buf), "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%ld:%02ld", t / 60, t % 60);
  }
  return buf;
}

}  // namespace cohort::cli
