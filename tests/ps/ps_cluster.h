// A parameter-server job in one process for the tests: the job's store (a real StoreServer on
// loopback), the launcher's ViewManager ticking on a thread of its own, and N servers, each a
// ps::Server with its own connections, as a server process has. kill(i) stops one abruptly (its
// connections close, its heartbeats stop) and tells the manager, as the launcher does when a
// server process exits; replace(i) starts a new process for the same index.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cohort/base/clock.h"
#include "cohort/ps/client.h"
#include "cohort/ps/server.h"
#include "cohort/ps/view.h"
#include "cohort/store/tcp_store.h"

namespace cohort::ps::testing {

inline const std::string kToken = "ps-test-token";

class PsCluster {
 public:
  explicit PsCluster(const ServerSettings& settings)
      : settings_(settings), store_server_({.token = kToken}) {
    admin_ = std::make_unique<store::TcpStore>(store_server_.endpoint(), kToken);
    admin_->set(keys::kSettings, store::to_bytes(settings.to_json()));
    manager_ = std::make_unique<ViewManager>(*admin_, settings.servers, settings.failure_timeout);
    for (int i = 0; i < settings.servers; ++i) servers_[i] = start_server(i);
    ticker_ = std::thread([this] {
      while (!stop_) {
        {
          std::lock_guard lk(mu_);
          for (auto& e : manager_->tick()) events_.push_back(e);
          for (int i : manager_->take_lost()) lost_.push_back(i);
        }
        std::this_thread::sleep_for(Millis(5));
      }
    });
  }
  ~PsCluster() {
    stop_ = true;
    ticker_.join();
    servers_.clear();
  }

  std::string store() const { return store_server_.endpoint().str(); }

  ClientOptions client_options(uint32_t slot, Millis timeout = Millis(10000)) const {
    return {.store = store(),
            .token = kToken,
            .name = "worker " + std::to_string(slot),
            .slot = slot,
            .timeout = timeout};
  }

  // Stops server i at once and reports its exit to the view manager.
  void kill(int i) {
    servers_.erase(i);
    std::lock_guard lk(mu_);
    manager_->server_exited(i, "was killed");
  }
  // Stops server i without telling anyone: the manager finds it by its silence.
  void silence(int i) { servers_.erase(i); }
  void replace(int i) { servers_[i] = start_server(i); }
  Server& server(int i) { return *servers_.at(i); }

  View view() {
    std::lock_guard lk(mu_);
    return manager_->view();
  }
  // Waits until the manager has published a view satisfying `pred` (or `limit` passes).
  template <typename Pred>
  bool wait_view(Pred pred, Millis limit = Millis(10000)) {
    const Deadline d = Deadline::after(limit);
    while (!d.expired()) {
      {
        std::lock_guard lk(mu_);
        if (manager_->ready() && pred(manager_->view())) return true;
      }
      std::this_thread::sleep_for(Millis(5));
    }
    return false;
  }
  std::vector<nlohmann::json> events() {
    std::lock_guard lk(mu_);
    return events_;
  }
  std::optional<std::string> failure() {
    std::lock_guard lk(mu_);
    return manager_->failure();
  }
  // Whether server index `backup`'s current process holds shard `shard` (it said so in the store).
  bool synced(uint32_t shard, int server) {
    return admin_->check({keys::synced(shard, servers_.at(server)->incarnation())});
  }

 private:
  std::unique_ptr<Server> start_server(int i) {
    return std::make_unique<Server>(ServerOptions{.index = i, .store = store(), .token = kToken});
  }

  ServerSettings settings_;
  store::StoreServer store_server_;
  std::unique_ptr<store::TcpStore> admin_;
  std::mutex mu_;
  std::unique_ptr<ViewManager> manager_;
  std::vector<nlohmann::json> events_;
  std::vector<int> lost_;
  std::map<int, std::unique_ptr<Server>> servers_;
  std::atomic<bool> stop_{false};
  std::thread ticker_;
};

}  // namespace cohort::ps::testing
