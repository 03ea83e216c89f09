// Little-endian encoding helpers for wire formats. Readers check bounds and throw ProtocolError.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "cohort/base/error.h"

namespace cohort {

// memcpy that allows empty ranges (an empty vector's data() may be null, which memcpy may not be
// given even for zero bytes).
inline void copy_bytes(void* dst, const void* src, size_t n) {
  if (n > 0) std::memcpy(dst, src, n);
}

class ByteWriter {
 public:
  template <typename T>
  ByteWriter& put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    buf_.insert(buf_.end(), p, p + sizeof(T));  // x86-64 and aarch64 Linux are little-endian
    return *this;
  }
  ByteWriter& put_bytes(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    buf_.insert(buf_.end(), p, p + n);
    return *this;
  }
  // Length-prefixed (u32) string.
  ByteWriter& put_string(std::string_view s) {
    put<uint32_t>(static_cast<uint32_t>(s.size()));
    return put_bytes(s.data(), s.size());
  }
  const std::vector<uint8_t>& bytes() const { return buf_; }
  std::vector<uint8_t> take() { return std::move(buf_); }

 private:
  std::vector<uint8_t> buf_;
};

class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t n) : p_(data), end_(data + n) {}
  explicit ByteReader(const std::vector<uint8_t>& v) : ByteReader(v.data(), v.size()) {}

  template <typename T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    need(sizeof(T));
    T v;
    std::memcpy(&v, p_, sizeof(T));
    p_ += sizeof(T);
    return v;
  }
  std::string get_string() {
    auto n = get<uint32_t>();
    need(n);
    std::string s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }
  const uint8_t* get_bytes(size_t n) {
    need(n);
    const uint8_t* r = p_;
    p_ += n;
    return r;
  }
  size_t remaining() const { return static_cast<size_t>(end_ - p_); }
  bool done() const { return p_ == end_; }

 private:
  void need(size_t n) const {
    if (static_cast<size_t>(end_ - p_) < n) throw ProtocolError("message truncated");
  }
  const uint8_t* p_;
  const uint8_t* end_;
};

}  // namespace cohort
