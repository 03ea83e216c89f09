// StatusPoller: reads what the workers publish through the job's store — job/joined/<rank>,
// job/status/<rank> and job/heartbeat/<rank> — into a JobMonitor, on a thread of its own, every
// `interval`. It uses its own store client so that it never contends with the launcher's.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "cohort/monitor/job_monitor.h"
#include "cohort/store/store.h"

namespace cohort::monitor {

class StatusPoller {
 public:
  StatusPoller(std::unique_ptr<store::Store> store, JobMonitor& monitor, int world_size,
               std::chrono::milliseconds interval = std::chrono::milliseconds(250));
  ~StatusPoller();  // stops the thread
  StatusPoller(const StatusPoller&) = delete;
  StatusPoller& operator=(const StatusPoller&) = delete;

  // One pass over every rank (the thread calls this; tests may too, before start()).
  void poll_once();
  void start();
  void stop();

 private:
  std::unique_ptr<store::Store> store_;
  JobMonitor& monitor_;
  int world_size_;
  std::chrono::milliseconds interval_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace cohort::monitor
