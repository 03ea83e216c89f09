// Element types of the buffers the communication core moves and reduces.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace cohort {

enum class DType : uint8_t {
  F32 = 0,
  F64 = 1,
  F16 = 2,
  BF16 = 3,
  I32 = 4,
  I64 = 5,
  I8 = 6,
  U8 = 7,
  Bool = 8,  // one byte, 0 or 1: sum and max are "or", min and product "and"
};

inline constexpr DType kAllDTypes[] = {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32,
                                       DType::I64, DType::I8,  DType::U8,  DType::Bool};
// The types of two bytes or more (what gradients and most tensors are).
inline constexpr DType kWideDTypes[] = {DType::F32,  DType::F64, DType::F16,
                                        DType::BF16, DType::I32, DType::I64};

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32:
      return 4;
    case DType::F64:
      return 8;
    case DType::F16:
      return 2;
    case DType::BF16:
      return 2;
    case DType::I32:
      return 4;
    case DType::I64:
      return 8;
    case DType::I8:
      return 1;
    case DType::U8:
      return 1;
    case DType::Bool:
      return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "f32";
    case DType::F64:
      return "f64";
    case DType::F16:
      return "f16";
    case DType::BF16:
      return "bf16";
    case DType::I32:
      return "i32";
    case DType::I64:
      return "i64";
    case DType::I8:
      return "i8";
    case DType::U8:
      return "u8";
    case DType::Bool:
      return "bool";
  }
  return "?";
}

constexpr bool dtype_is_float(DType t) {
  return t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16;
}

// Whether `t` is a valid value of the enumeration (a byte read off the wire may not be).
constexpr bool dtype_is_known(uint8_t t) {
  return t <= static_cast<uint8_t>(DType::Bool);
}

// A span of typed memory: what every collective operates on. Not owning.
struct Buffer {
  DType dtype = DType::F32;
  void* data = nullptr;
  size_t count = 0;

  size_t bytes() const { return count * dtype_size(dtype); }
  uint8_t* byte_ptr() const { return static_cast<uint8_t*>(data); }
};

}  // namespace cohort
