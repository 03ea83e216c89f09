#include "cohort/store/prefix_store.h"

namespace cohort::store {

PrefixStore::PrefixStore(std::string prefix, Store& base)
    : prefix_(std::move(prefix)), base_(base) {
  timeout_ = base.timeout();
}

std::vector<std::string> PrefixStore::ks(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& key : keys) out.push_back(k(key));
  return out;
}

void PrefixStore::set(const std::string& key, const Bytes& value) {
  base_.set(k(key), value);
}
Bytes PrefixStore::get(const std::string& key) {
  base_.wait({k(key)}, timeout_);
  return base_.get(k(key));
}
int64_t PrefixStore::add(const std::string& key, int64_t delta) {
  return base_.add(k(key), delta);
}
Bytes PrefixStore::compare_set(const std::string& key, const Bytes& expected,
                               const Bytes& desired) {
  return base_.compare_set(k(key), expected, desired);
}
bool PrefixStore::delete_key(const std::string& key) {
  return base_.delete_key(k(key));
}
bool PrefixStore::check(const std::vector<std::string>& keys) {
  return base_.check(ks(keys));
}
void PrefixStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  base_.wait(ks(keys), timeout);
}

}  // namespace cohort::store
