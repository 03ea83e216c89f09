#include "cohort/elastic/leadership.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "cohort/base/error.h"

namespace cohort::elastic {

const std::string Leadership::kKey = "job/coordinator";

Leadership::Leadership(const store::EtcdAddress& job, Millis ttl, std::string who)
    : store_(std::make_unique<store::EtcdStore>(job)),
      renew_(std::make_unique<store::EtcdStore>(job)),
      ttl_(ttl),
      who_(std::move(who)) {
  // A renewal that takes longer than this is no use: the lead would be over by its answer.
  renew_->set_timeout(std::max(ttl / 3, Millis(100)));
}

Leadership::~Leadership() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (held()) {
    try {
      store_->revoke_lease(lease_);  // a clean end: no standby waits out the lease
    } catch (const std::exception& e) {
      spdlog::warn("could not give up the lead of the job: {}", e.what());
    }
  }
}

bool Leadership::try_lead() {
  if (thread_.joinable()) return held();  // led already (or did, and lost it for good)
  if (store_->check({kKey})) return false;
  // A lease of its own for each try: one granted while another led would have expired unrenewed.
  // etcd counts its ttl from the grant, so this process's does too.
  const auto granted = Clock::now();
  const int64_t lease = store_->grant_lease(ttl_);
  if (!store_->create_with_lease(kKey, store::to_bytes(who_), lease)) {
    store_->revoke_lease(lease);
    return false;
  }
  lease_ = lease;
  renewed_ = granted.time_since_epoch().count();
  held_ = true;
  thread_ = std::thread([this] { renew_loop(); });
  return true;
}

void Leadership::wait_to_lead(const std::function<void(const std::string&)>& on_wait) {
  bool told = false;
  for (;;) {
    try {
      if (try_lead()) return;
      if (!told) on_wait(leader());
      told = true;
    } catch (const Error& e) {
      // etcd electing a leader or out of reach for a while: a standby keeps waiting.
      spdlog::warn("standby: {}", e.what());
    }
    // The key goes when the leader's lease expires (a ttl after its last renewal): looking a
    // few times per ttl takes over within a fraction of it.
    std::unique_lock lk(mu_);
    cv_.wait_for(lk, std::clamp(ttl_ / 10, Millis(20), Millis(500)));
  }
}

bool Leadership::held() const {
  if (!held_.load()) return false;
  const Clock::time_point renewed{Clock::duration(renewed_.load())};
  if (Clock::now() - renewed < ttl_ * 2 / 3) return true;
  held_ = false;  // for good: a later renewal does not make this process the leader again
  return false;
}

std::string Leadership::leader() {
  try {
    if (!store_->check({kKey})) return "";
    return store::to_string(store_->get(kKey));
  } catch (const TimeoutError&) {
    return "";  // gone in between
  }
}

void Leadership::renew_loop() {
  // Renewed four times per ttl: one slow renewal does not end the lead.
  const Millis period = std::max(ttl_ / 4, Millis(50));
  std::unique_lock lk(mu_);
  while (!stop_) {
    cv_.wait_for(lk, period, [&] { return stop_; });
    if (stop_) break;
    lk.unlock();
    const auto sent = Clock::now();  // etcd counts the lease from no earlier than this
    try {
      if (held() && renew_->keep_alive(lease_)) renewed_ = sent.time_since_epoch().count();
    } catch (const std::exception& e) {
      spdlog::warn("renewing the lead of the job failed: {}", e.what());
    }
    lk.lock();
    if (!held()) {
      spdlog::error("this coordinator's lease lapsed: it no longer leads the job");
      lk.unlock();
      try {
        renew_->revoke_lease(lease_);  // a standby need not wait out the rest of it
      } catch (const std::exception&) {
      }
      return;
    }
  }
}

}  // namespace cohort::elastic
