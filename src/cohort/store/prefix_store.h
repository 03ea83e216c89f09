// Namespacing: every key is stored as "<prefix>/<key>" in the underlying store.
#pragma once

#include "cohort/store/store.h"

namespace cohort::store {

class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, Store& base);

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool delete_key(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::wait;

 private:
  std::string k(const std::string& key) const { return prefix_ + "/" + key; }
  std::vector<std::string> ks(const std::vector<std::string>& keys) const;
  std::string prefix_;
  Store& base_;
};

}  // namespace cohort::store
