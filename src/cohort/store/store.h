// Rendezvous key-value store: how ranks find each other and agree on small facts.
// Implementations: MemoryStore (one process, tests), TcpStore (client of the server embedded in
// the coordinator), PrefixStore (namespacing on top of any store).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cohort/base/clock.h"

namespace cohort::store {

using Bytes = std::vector<uint8_t>;

inline Bytes to_bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }
inline std::string to_string(const Bytes& b) { return std::string(b.begin(), b.end()); }

class Store {
 public:
  virtual ~Store() = default;

  virtual void set(const std::string& key, const Bytes& value) = 0;
  // Waits (until the store's default timeout) for the key to exist, then returns its value.
  // Throws TimeoutError naming the key.
  virtual Bytes get(const std::string& key) = 0;
  // Adds delta to the integer stored at key (missing = 0) and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Sets key to desired if its current value equals expected (an empty expected means "absent").
  // Returns the value after the call: desired on success, the current value otherwise.
  virtual Bytes compare_set(const std::string& key, const Bytes& expected,
                            const Bytes& desired) = 0;
  // Removes the key; returns whether it existed.
  virtual bool delete_key(const std::string& key) = 0;
  // Whether every key exists right now (no waiting).
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Blocks until every key exists; throws TimeoutError listing the keys still missing.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds t) { timeout_ = t; }

 protected:
  std::chrono::milliseconds timeout_{std::chrono::seconds(30)};
};

}  // namespace cohort::store
