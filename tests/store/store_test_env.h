// Store implementations under test, behind one interface so that each test is written once.
#pragma once

#include <unistd.h>

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "cohort/store/etcd_store.h"
#include "cohort/store/memory_store.h"
#include "cohort/store/prefix_store.h"
#include "cohort/store/tcp_store.h"
#include "etcd_cluster.h"

namespace cohort::store::testing {

inline constexpr const char* kToken = "test-job-token";

// One underlying store; client() hands out another client of it (a new connection for TcpStore,
// the same object for MemoryStore), owned by the environment.
class StoreEnv {
 public:
  virtual ~StoreEnv() = default;
  virtual Store& client(Millis timeout = Millis(10000)) = 0;
};

class MemoryEnv : public StoreEnv {
 public:
  // Every "client" is the one store, so the latest timeout asked for applies to all: create the
  // clients before starting threads.
  Store& client(Millis timeout) override {
    store_.set_timeout(timeout);
    return store_;
  }

 private:
  MemoryStore store_;
};

class TcpEnv : public StoreEnv {
 public:
  explicit TcpEnv(StoreServerOptions o = {.token = kToken}) : server_(o) {}
  Store& client(Millis timeout) override {
    clients_.push_back(std::make_unique<TcpStore>(server_.endpoint(), kToken, timeout));
    return *clients_.back();
  }
  StoreServer& server() { return server_; }

 private:
  StoreServer server_;
  std::vector<std::unique_ptr<TcpStore>> clients_;
};

// A real etcd (one per test process, started at first use), a fresh prefix for each environment.
class EtcdEnv : public StoreEnv {
 public:
  EtcdEnv() : url_(cluster().url("t" + std::to_string(getpid()) + "-" + std::to_string(next()))) {}
  Store& client(Millis timeout) override {
    clients_.push_back(std::make_unique<EtcdStore>(EtcdAddress::parse(url_), timeout));
    return *clients_.back();
  }
  static EtcdCluster& cluster() {
    static EtcdCluster c(1);
    return c;
  }

 private:
  static int next() {
    static int n = 0;
    return n++;
  }
  std::string url_;
  std::vector<std::unique_ptr<EtcdStore>> clients_;
};

class PrefixEnv : public StoreEnv {
 public:
  PrefixEnv(std::unique_ptr<StoreEnv> base, std::string prefix)
      : base_(std::move(base)), prefix_(std::move(prefix)) {}
  Store& client(Millis timeout) override {
    views_.push_back(std::make_unique<PrefixStore>(prefix_, base_->client(timeout)));
    return *views_.back();
  }

 private:
  std::unique_ptr<StoreEnv> base_;
  std::string prefix_;
  std::vector<std::unique_ptr<PrefixStore>> views_;
};

struct StoreKind {
  std::string name;
  std::function<std::unique_ptr<StoreEnv>()> make;
};

inline void PrintTo(const StoreKind& k, std::ostream* os) {
  *os << k.name;
}

inline std::vector<StoreKind> base_kinds() {
  return {{"Memory", [] { return std::make_unique<MemoryEnv>(); }},
          {"Tcp", [] { return std::make_unique<TcpEnv>(); }}};
}

}  // namespace cohort::store::testing
