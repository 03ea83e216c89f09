#include "cohort/monitor/status_poller.h"

#include <algorithm>

#include "cohort/base/log.h"
#include "cohort/elastic/job_protocol.h"

namespace cohort::monitor {

using nlohmann::json;

namespace {

std::optional<std::string> read(store::Store& s, const std::string& key) {
  if (!s.check({key})) return std::nullopt;
  return store::to_string(s.get(key));
}

std::optional<json> read_json(store::Store& s, const std::string& key) {
  auto text = read(s, key);
  if (!text) return std::nullopt;
  json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return json{{"unreadable", *text}};
  return j;
}

}  // namespace

StatusPoller::StatusPoller(std::unique_ptr<store::Store> store, JobMonitor& monitor, int world_size,
                           std::chrono::milliseconds interval)
    : store_(std::move(store)), monitor_(monitor), world_size_(world_size), interval_(interval) {}

StatusPoller::~StatusPoller() {
  stop();
}

void StatusPoller::poll_once() {
  // Replacement workers (ranks from world_size on) get rows as the launcher starts them.
  const int ranks = std::max(world_size_, monitor_.ranks());
  for (int r = 0; r < ranks; ++r) {
    auto joined = read_json(*store_, elastic::keys::joined(r));
    auto status = read_json(*store_, elastic::keys::status(r));
    auto heartbeat = read(*store_, elastic::keys::heartbeat(r));
    monitor_.update_worker(r, joined, status, heartbeat);
  }
}

void StatusPoller::start() {
  thread_ = std::thread([this] {
    while (!stop_.load()) {
      try {
        poll_once();
      } catch (const std::exception& e) {
        // The store is gone (the job is ending): the console keeps the last picture.
        spdlog::warn("console: stopped reading worker status: {}", e.what());
        return;
      }
      for (auto slept = std::chrono::milliseconds(0); slept < interval_ && !stop_.load();
           slept += std::chrono::milliseconds(50)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  });
}

void StatusPoller::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

}  // namespace cohort::monitor
