#include "cohort/dist/c10d_store.h"

#include <exception>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "cohort/base/error.h"

namespace cohort::dist {

namespace {

// c10d's stores throw c10::Error (or std::runtime_error) for everything; Cohort's callers tell a
// lost store from a key that never came.
template <typename F>
auto translated(const std::string& what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const cohort::Error&) {
    throw;
  } catch (const std::exception& e) {
    throw cohort::Error("torch.distributed store: " + what + ": " + e.what());
  }
}

// PrefixStore keeps its prefix protected; a member pointer taken through a derived class reads
// it from any PrefixStore (the standard way to reach a protected member without a cast).
struct PrefixPeek : c10d::PrefixStore {
  using c10d::PrefixStore::prefix_;
};

}  // namespace

c10::intrusive_ptr<c10d::Store> second_connection(const c10::intrusive_ptr<c10d::Store>& store) {
  std::vector<std::string> prefixes;  // outermost first
  c10::intrusive_ptr<c10d::Store> inner = store;
  while (auto* p = dynamic_cast<c10d::PrefixStore*>(inner.get())) {
    prefixes.push_back(p->*(&PrefixPeek::prefix_));
    inner = p->getUnderlyingStore();
  }
  auto* tcp = dynamic_cast<c10d::TCPStore*>(inner.get());
  if (!tcp) return store;
  c10d::TCPStoreOptions options;
  options.port = tcp->getPort();
  options.isServer = false;
  options.waitWorkers = false;
  options.timeout = tcp->getTimeout();
  c10::intrusive_ptr<c10d::Store> out =
      c10::make_intrusive<c10d::TCPStore>(tcp->getHost(), options);
  for (auto it = prefixes.rbegin(); it != prefixes.rend(); ++it) {
    out = c10::make_intrusive<c10d::PrefixStore>(*it, out);
  }
  return out;
}

C10dStore::C10dStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {
  if (!store_) throw ConfigError("torch.distributed store: none given");
}

void C10dStore::set(const std::string& key, const store::Bytes& value) {
  translated("set " + key, [&] { store_->set(key, value); });
}

store::Bytes C10dStore::get(const std::string& key) {
  wait({key}, timeout_);
  return translated("get " + key, [&] { return store_->get(key); });
}

int64_t C10dStore::add(const std::string& key, int64_t delta) {
  return translated("add " + key, [&] { return store_->add(key, delta); });
}

store::Bytes C10dStore::compare_set(const std::string& key, const store::Bytes& expected,
                                    const store::Bytes& desired) {
  return translated("compare_set " + key,
                    [&] { return store_->compareSet(key, expected, desired); });
}

bool C10dStore::delete_key(const std::string& key) {
  return translated("delete " + key, [&] { return store_->deleteKey(key); });
}

bool C10dStore::check(const std::vector<std::string>& keys) {
  return translated("check", [&] { return store_->check(keys); });
}

void C10dStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  try {
    store_->wait(keys, timeout);
  } catch (const std::exception& e) {
    std::string missing;
    try {
      for (const auto& k : keys) {
        if (store_->check({k})) continue;
        if (!missing.empty()) missing += ", ";
        missing += k;
      }
    } catch (const std::exception&) {
      throw cohort::Error(std::string("torch.distributed store: wait: ") + e.what());
    }
    if (missing.empty()) return;  // they came just as the wait gave up
    throw TimeoutError("torch.distributed store: keys still missing after " +
                       std::to_string(timeout.count()) + " ms: " + missing + " (" + e.what() + ")");
  }
}

}  // namespace cohort::dist
