#include "cohort/elastic/reports.h"

#include <spdlog/spdlog.h>

#include "cohort/elastic/job_protocol.h"

namespace cohort::elastic {

using nlohmann::json;
using store::to_bytes;

JobReports::JobReports(std::unique_ptr<store::Store> store, int rank, Millis retry)
    : store_(std::move(store)), rank_(rank), retry_(retry) {
  thread_ = std::thread([this] { loop(); });
}

JobReports::~JobReports() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void JobReports::progress(const json& record) {
  std::lock_guard lk(mu_);
  queue_.push_back({.progress = true, .text = record.dump()});
  if (queue_.size() > kMaxQueued) {
    // Not the one being sent, which may have its number already.
    queue_.erase(queue_.begin() + (sending_ ? 1 : 0));
    if (dropped_++ == 0)
      spdlog::warn("the coordinator has been away for {} records: dropping the oldest", kMaxQueued);
  }
  cv_.notify_all();
}

void JobReports::event(const json& event) {
  json e = event;
  e["rank"] = rank_;
  std::lock_guard lk(mu_);
  queue_.push_back({.progress = false, .text = e.dump()});
  cv_.notify_all();
}

void JobReports::status(const json& status) {
  std::lock_guard lk(mu_);
  status_ = status.dump();
  cv_.notify_all();
}

bool JobReports::flush(Millis timeout) {
  std::unique_lock lk(mu_);
  return cv_.wait_for(lk, timeout, [&] { return queue_.empty() && !status_ && !sending_; });
}

bool JobReports::send_some(std::unique_lock<std::mutex>& lk) {
  sending_ = true;
  try {
    while (!queue_.empty()) {
      Record r = queue_.front();
      lk.unlock();
      const std::string& counter = r.progress ? keys::kMetricsNext : keys::kEventsNext;
      if (r.number < 0) r.number = static_cast<long>(store_->add(counter, 1) - 1);
      lk.lock();
      // Numbered: a resend after a failure below writes under the same number.
      if (!queue_.empty()) queue_.front().number = r.number;
      lk.unlock();
      store_->set(r.progress ? keys::metrics(r.number) : keys::event(r.number), to_bytes(r.text));
      lk.lock();
      if (!queue_.empty() && queue_.front().number == r.number) queue_.pop_front();
    }
    if (status_) {
      const std::string s = *status_;
      lk.unlock();
      store_->set(keys::status(rank_), to_bytes(s));
      lk.lock();
      if (status_ == s) status_.reset();
    }
  } catch (const std::exception& e) {
    if (!lk.owns_lock()) lk.lock();
    sending_ = false;
    spdlog::debug("reports to the coordinator wait: {}", e.what());
    return false;
  }
  sending_ = false;
  cv_.notify_all();
  return true;
}

void JobReports::loop() {
  std::unique_lock lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return stop_ || !queue_.empty() || status_; });
    if (stop_) return;
    if (!send_some(lk)) {
      cv_.notify_all();
      cv_.wait_for(lk, retry_, [&] { return stop_; });
    }
  }
}

}  // namespace cohort::elastic
