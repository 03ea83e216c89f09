// In-process Store: a map under a mutex with a condition variable for waiters. Used by tests that
// run ranks as threads, and as the state behind StoreServer (which calls only its non-blocking
// members).
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>

#include "cohort/store/store.h"

namespace cohort::store {

class MemoryStore : public Store {
 public:
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool delete_key(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::wait;

  // Non-blocking lookup, for servers that must never block their event loop.
  std::optional<Bytes> try_get(const std::string& key);
  // The index of the first of keys[from, end) that is absent (keys.size() if none is).
  size_t first_absent(const std::vector<std::string>& keys, size_t from);
  size_t size();
  // Every key and its value (a copy).
  std::map<std::string, Bytes> contents();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Bytes> data_;
};

// Formats the missing keys of a wait for a TimeoutError message.
std::string describe_missing(const std::vector<std::string>& missing);

// The integer a counter key holds (an empty value is 0); throws Error naming the key otherwise.
int64_t counter_value(const std::string& key, const Bytes& value);

}  // namespace cohort::store
