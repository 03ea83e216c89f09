#include "cohort/store/memory_store.h"

#include <algorithm>

#include "cohort/base/error.h"

namespace cohort::store {

std::string describe_missing(const std::vector<std::string>& missing) {
  std::string s;
  for (size_t i = 0; i < missing.size() && i < 8; ++i) {
    if (i) s += ", ";
    s += "'" + missing[i] + "'";
  }
  if (missing.size() > 8) s += " and " + std::to_string(missing.size() - 8) + " more";
  return s;
}

int64_t counter_value(const std::string& key, const Bytes& value) {
  if (value.empty()) return 0;
  const std::string text = to_string(value);
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size()) throw Error("store key '" + key + "' does not hold an integer");
  return v;
}

void MemoryStore::set(const std::string& key, const Bytes& value) {
  {
    std::lock_guard lk(mu_);
    data_[key] = value;
  }
  cv_.notify_all();
}

namespace {

// cv waits take a time point: clamp so that now + timeout cannot overflow.
Clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  return Clock::now() +
         std::clamp<std::chrono::milliseconds>(timeout, {}, std::chrono::hours(24 * 7));
}

}  // namespace

Bytes MemoryStore::get(const std::string& key) {
  // Waiting and reading under one lock: a delete in between cannot turn a hit into a miss.
  std::unique_lock lk(mu_);
  if (!cv_.wait_until(lk, deadline_after(timeout_), [&] { return data_.count(key) > 0; })) {
    throw TimeoutError("store get of key '" + key + "' timed out after " +
                       std::to_string(timeout_.count()) + " ms");
  }
  return data_.at(key);
}

int64_t MemoryStore::add(const std::string& key, int64_t delta) {
  int64_t v = 0;
  {
    std::lock_guard lk(mu_);
    auto it = data_.find(key);
    if (it != data_.end()) v = counter_value(key, it->second);
    if (__builtin_add_overflow(v, delta, &v)) {
      throw Error("add to '" + key + "': " + std::to_string(delta) +
                  " would take the counter past the range of a 64-bit integer");
    }
    data_[key] = to_bytes(std::to_string(v));
  }
  cv_.notify_all();
  return v;
}

Bytes MemoryStore::compare_set(const std::string& key, const Bytes& expected,
                               const Bytes& desired) {
  Bytes result;
  {
    std::lock_guard lk(mu_);
    auto it = data_.find(key);
    if (it == data_.end()) {
      if (!expected.empty()) return {};
      data_[key] = desired;
      result = desired;
    } else if (it->second == expected) {
      it->second = desired;
      result = desired;
    } else {
      return it->second;
    }
  }
  cv_.notify_all();
  return result;
}

bool MemoryStore::delete_key(const std::string& key) {
  std::lock_guard lk(mu_);
  return data_.erase(key) > 0;
}

bool MemoryStore::check(const std::vector<std::string>& keys) {
  std::lock_guard lk(mu_);
  for (const auto& k : keys) {
    if (!data_.count(k)) return false;
  }
  return true;
}

size_t MemoryStore::first_absent(const std::vector<std::string>& keys, size_t from) {
  std::lock_guard lk(mu_);
  while (from < keys.size() && data_.count(keys[from])) ++from;
  return from;
}

void MemoryStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::unique_lock lk(mu_);
  auto missing = [&] {
    std::vector<std::string> m;
    for (const auto& k : keys) {
      if (!data_.count(k)) m.push_back(k);
    }
    return m;
  };
  if (!cv_.wait_until(lk, deadline_after(timeout), [&] { return missing().empty(); })) {
    throw TimeoutError("store wait timed out after " + std::to_string(timeout.count()) +
                       " ms; missing keys: " + describe_missing(missing()));
  }
}

std::optional<Bytes> MemoryStore::try_get(const std::string& key) {
  std::lock_guard lk(mu_);
  auto it = data_.find(key);
  if (it == data_.end()) return std::nullopt;
  return it->second;
}

std::map<std::string, Bytes> MemoryStore::contents() {
  std::lock_guard lk(mu_);
  return data_;
}

size_t MemoryStore::size() {
  std::lock_guard lk(mu_);
  return data_.size();
}

}  // namespace cohort::store
