#include "cohort/elastic/leadership.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "cohort/base/error.h"

namespace cohort::elastic {
namespace {

const std::string kLeaderKey = "job/coordinator";

}  // namespace

Leadership::Leadership(const store::EtcdAddress& job, Millis ttl, std::string who)
    : store_(std::make_unique<store::EtcdStore>(job)),
      renew_(std::make_unique<store::EtcdStore>(job, std::max(ttl / 3, Millis(100)))),
      ttl_(ttl),
      who_(std::move(who)) {}

Leadership::~Leadership() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (held_.load()) {
    try {
      store_->revoke_lease(lease_);  // a clean end: no standby waits out the lease
    } catch (const Error& e) {
      spdlog::warn("could not give up the lead of the job: {}", e.what());
    }
  }
}

bool Leadership::try_lead() {
  if (store_->check({kLeaderKey})) return false;
  // A lease of its own for each try: one granted while another led would have expired unrenewed.
  const int64_t lease = store_->grant_lease(ttl_);
  if (!store_->create_with_lease(kLeaderKey, store::to_bytes(who_), lease)) {
    store_->revoke_lease(lease);
    return false;
  }
  lease_ = lease;
  renewed_ = Clock::now().time_since_epoch().count();
  held_ = true;
  thread_ = std::thread([this] { renew_loop(); });
  return true;
}

void Leadership::wait_to_lead(const std::function<void(const std::string&)>& on_wait) {
  bool told = false;
  while (!try_lead()) {
    if (!told) on_wait(leader());
    told = true;
    // The key goes when the leader's lease expires (a ttl after its last renewal): looking a
    // few times per ttl takes over within a fraction of it.
    std::unique_lock lk(mu_);
    cv_.wait_for(lk, std::clamp(ttl_ / 10, Millis(20), Millis(500)));
  }
}

bool Leadership::held() const {
  const Clock::time_point renewed{Clock::duration(renewed_.load())};
  return held_.load() && Clock::now() - renewed < ttl_ * 2 / 3;
}

std::string Leadership::leader() {
  try {
    if (!store_->check({kLeaderKey})) return "";
    return store::to_string(store_->get(kLeaderKey));
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
    bool alive = false;
    const auto sent = Clock::now();  // etcd counts the lease from no earlier than this
    try {
      alive = renew_->keep_alive(lease_);
      if (alive) renewed_ = sent.time_since_epoch().count();
    } catch (const Error& e) {
      spdlog::warn("renewing the lead of the job failed: {}", e.what());
      // Half the ttl: the lead ends here well before etcd can hand it to a standby.
      alive = held();
    }
    lk.lock();
    if (!alive) {
      held_ = false;
      spdlog::error("this coordinator's lease expired: it no longer leads the job");
      return;
    }
  }
}

}  // namespace cohort::elastic
