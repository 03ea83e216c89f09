// What a torch.distributed call hands the communicator: its tensors as Cohort buffers, its
// reduction as a Cohort ReduceOp. Everything Cohort cannot do is refused here with an error that
// names the operation (never a silent conversion or a wrong result).
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <vector>

#include "cohort/base/dtype.h"
#include "cohort/comm/types.h"

namespace cohort::dist {

// The element type Cohort moves a tensor of `type` as; ConfigError naming `op` for the others.
DType dtype_of(at::ScalarType type, const char* op);
// A CPU, dense, contiguous tensor as a buffer over its memory; ConfigError naming `op` and what is
// wrong otherwise.
Buffer buffer_of(const at::Tensor& t, const char* op);
// The one tensor of a per-process list (torch.distributed passes lists, one tensor per device).
const at::Tensor& single(const std::vector<at::Tensor>& tensors, const char* op);
// ConfigError naming `op` unless every tensor of `list` has `like`'s element type and shape.
void check_alike(const std::vector<at::Tensor>& list, const at::Tensor& like, const char* op);
// The reduction; ConfigError naming `op` for one Cohort lacks or one invalid for `dtype`.
comm::ReduceOp reduce_op_of(const c10d::ReduceOp& op, DType dtype, const char* what);
// The tensors of `list` one after the other in one new 1-D tensor, and back.
at::Tensor flat_cat(const std::vector<at::Tensor>& list);
void copy_out(const at::Tensor& flat, const std::vector<at::Tensor>& list);
// A torch.distributed timeout (kUnsetTimeout: the group's) as a Cohort one (0: the default).
std::chrono::milliseconds timeout_of(std::chrono::milliseconds t);

}  // namespace cohort::dist
