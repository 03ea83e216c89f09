#include "cohort/dist/c10d_store.h"

#include <exception>

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

}  // namespace

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
