#include "cohort/dist/tensors.h"

#include <c10/core/ScalarType.h>

#include "cohort/base/error.h"
#include "cohort/comm/reduce.h"

namespace cohort::dist {

namespace {

[[noreturn]] void refuse(const char* op, const std::string& why) {
  throw ConfigError(std::string("cohort backend: ") + op + ": " + why);
}

}  // namespace

DType dtype_of(at::ScalarType type, const char* op) {
  switch (type) {
    case at::kFloat:
      return DType::F32;
    case at::kDouble:
      return DType::F64;
    case at::kHalf:
      return DType::F16;
    case at::kBFloat16:
      return DType::BF16;
    case at::kInt:
      return DType::I32;
    case at::kLong:
      return DType::I64;
    case at::kChar:
      return DType::I8;
    case at::kByte:
      return DType::U8;
    case at::kBool:
      return DType::Bool;
    default:
      refuse(op, std::string("tensors of type ") + c10::toString(type) +
                     " are not supported (float32, float64, float16, bfloat16, int64, int32, "
                     "int8, uint8 and bool are)");
  }
}

Buffer buffer_of(const at::Tensor& t, const char* op) {
  if (!t.defined()) refuse(op, "a tensor is undefined");
  if (!t.device().is_cpu()) refuse(op, "tensors must be on the CPU (got " + t.device().str() + ")");
  if (t.layout() != at::kStrided) refuse(op, "sparse tensors are not supported");
  if (!t.is_contiguous()) {
    refuse(op, "tensors must be contiguous (call .contiguous() on it first)");
  }
  return Buffer{dtype_of(t.scalar_type(), op), t.data_ptr(), static_cast<size_t>(t.numel())};
}

const at::Tensor& single(const std::vector<at::Tensor>& tensors, const char* op) {
  if (tensors.size() != 1) {
    refuse(op, "takes one tensor per process (got " + std::to_string(tensors.size()) + ")");
  }
  return tensors[0];
}

void check_alike(const std::vector<at::Tensor>& list, const at::Tensor& like, const char* op) {
  for (size_t i = 0; i < list.size(); ++i) {
    const at::Tensor& t = list[i];
    if (!t.device().is_cpu()) {
      refuse(op, "tensor " + std::to_string(i) + " of the list is on " + t.device().str() +
                     ", not on the CPU");
    }
    if (t.scalar_type() != like.scalar_type() || t.sizes() != like.sizes()) {
      refuse(op, "tensor " + std::to_string(i) + " of the list is " +
                     std::string(c10::toString(t.scalar_type())) + " of " + c10::str(t.sizes()) +
                     ", unlike the " + std::string(c10::toString(like.scalar_type())) + " of " +
                     c10::str(like.sizes()) + " it goes with");
    }
  }
}

comm::ReduceOp reduce_op_of(const c10d::ReduceOp& op, DType dtype, const char* what) {
  comm::ReduceOp r{};
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      r = comm::ReduceOp::Sum;
      break;
    case c10d::ReduceOp::AVG:
      r = comm::ReduceOp::Avg;
      break;
    case c10d::ReduceOp::MIN:
      r = comm::ReduceOp::Min;
      break;
    case c10d::ReduceOp::MAX:
      r = comm::ReduceOp::Max;
      break;
    case c10d::ReduceOp::PRODUCT:
      r = comm::ReduceOp::Product;
      break;
    case c10d::ReduceOp::BAND:
      r = comm::ReduceOp::BAnd;
      break;
    case c10d::ReduceOp::BOR:
      r = comm::ReduceOp::BOr;
      break;
    case c10d::ReduceOp::BXOR:
      r = comm::ReduceOp::BXor;
      break;
    case c10d::ReduceOp::PREMUL_SUM:
      refuse(what, "ReduceOp.PREMUL_SUM is NCCL's only");
    default:
      refuse(what, "this ReduceOp is not supported");
  }
  try {
    comm::check_reduction(dtype, r, what);
  } catch (const ConfigError& e) {
    refuse(what, e.what());
  }
  return r;
}

at::Tensor flat_cat(const std::vector<at::Tensor>& list) {
  return at::cat(c10::fmap(list, [](const at::Tensor& t) { return t.reshape(-1); }));
}

void copy_out(const at::Tensor& flat, const std::vector<at::Tensor>& list) {
  int64_t off = 0;
  for (const at::Tensor& t : list) {
    // Into the tensor as it is laid out (a transposed view, say): copy_ follows its strides.
    t.copy_(flat.narrow(0, off, t.numel()).view(t.sizes()));
    off += t.numel();
  }
}

std::chrono::milliseconds timeout_of(std::chrono::milliseconds t) {
  return t.count() <= 0 ? std::chrono::milliseconds(0) : t;
}

}  // namespace cohort::dist
