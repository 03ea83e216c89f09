// Which coordinator leads a job whose store is in etcd: the one whose lease holds the key
// job/coordinator. The leader renews its lease from a thread of its own; when it dies (or is cut
// off from etcd for longer than the lease), etcd deletes the key and a standby that campaigns for
// it takes over. A leader whose renewal fails stops leading at once (held() turns false), so two
// coordinators never act on one job: the old one's lease has expired before the new one's key can
// be created.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "cohort/base/clock.h"
#include "cohort/store/etcd_store.h"

namespace cohort::elastic {

class Leadership {
 public:
  // `ttl`: how long after this process's last renewal its leadership ends (a standby's takeover
  // time). `who` is written to the key (host and pid), for the other coordinators' messages.
  Leadership(const store::EtcdAddress& job, Millis ttl, std::string who);
  ~Leadership();
  Leadership(const Leadership&) = delete;
  Leadership& operator=(const Leadership&) = delete;

  // Takes the lead if nobody holds it; whether it did. Throws Error when etcd cannot be reached.
  bool try_lead();
  // Waits until this process leads (a standby); `on_wait` is called once, with the current
  // leader's description, when the lead is held by another.
  void wait_to_lead(const std::function<void(const std::string&)>& on_wait);
  // Whether this process still leads: it took the lead, and its last renewal that etcd confirmed
  // was sent less than two thirds of a ttl ago (a process that was stopped or starved for longer
  // may already have been replaced, before its renewing thread could tell). Once false, false
  // for good.
  bool held() const;
  // The current leader's description, or "" when there is none.
  std::string leader();
  // The lease that holds the key while this process leads (writes can be fenced with it).
  int64_t lease() const { return lease_; }

  static const std::string kKey;  // job/coordinator

 private:
  void renew_loop();

  std::unique_ptr<store::EtcdStore> store_;  // the campaign's calls
  std::unique_ptr<store::EtcdStore> renew_;  // the renewing thread's own connection
  Millis ttl_;
  std::string who_;
  int64_t lease_ = 0;
  mutable std::atomic<bool> held_{false};  // once false after leading, false for good
  std::atomic<Clock::rep> renewed_{0};     // when the last confirmed renewal was sent
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace cohort::elastic
