// ProcessGroupCohort's reduce, gather, scatter and all-to-all (process_group.h).
#include "cohort/base/error.h"
#include "cohort/dist/process_group.h"
#include "cohort/dist/tensors.h"

namespace cohort::dist {

namespace {

// torch's split sizes count rows (the first dimension); Cohort's counts count elements.
std::vector<size_t> element_counts(const std::vector<int64_t>& splits, const at::Tensor& t,
                                   int size, const char* op) {
  if (splits.empty()) return {};
  if (splits.size() != static_cast<size_t>(size)) {
    throw ConfigError(std::string("cohort backend: ") + op + ": " + std::to_string(splits.size()) +
                      " split sizes for a group of " + std::to_string(size));
  }
  const int64_t row = t.dim() == 0 || t.size(0) == 0 ? 0 : t.numel() / t.size(0);
  std::vector<size_t> counts;
  for (int64_t s : splits) {
    if (s < 0) throw ConfigError(std::string("cohort backend: ") + op + ": negative split size");
    counts.push_back(static_cast<size_t>(s * row));
  }
  return counts;
}

}  // namespace

int ProcessGroupCohort::checked_root(int64_t root, const char* op) const {
  if (root < 0 || root >= getSize()) {
    throw ConfigError(std::string("cohort backend: ") + op + ": root " + std::to_string(root) +
                      " is not a rank of this group of " + std::to_string(getSize()));
  }
  return static_cast<int>(root);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::reduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::ReduceOptions& opts) {
  const char* op = "reduce";
  const Buffer buf = buffer_of(single(tensors, op), op);
  if (opts.rootTensor != 0) throw ConfigError("cohort backend: reduce: rootTensor must be 0");
  auto work = comm_->reduce(buf, {.op = reduce_op_of(opts.reduceOp, buf.dtype, op),
                                  .root = checked_root(opts.rootRank, op),
                                  .timeout = timeout_of(opts.timeout)});
  return wrap(c10d::OpType::REDUCE, std::move(work), tensors);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  const char* op = "gather";
  const at::Tensor& in = single(inputs, op);
  const int root = checked_root(opts.rootRank, op);
  const Buffer in_buf = buffer_of(in, op);
  if (getRank() != root) {
    if (!outputs.empty() && !outputs[0].empty()) {
      throw ConfigError("cohort backend: gather: only the root (" + std::to_string(root) +
                        ") passes a gather list");
    }
    auto work = comm_->gather(in_buf, Buffer{in_buf.dtype, nullptr, 0},
                              {.root = root, .timeout = timeout_of(opts.timeout)});
    return wrap(c10d::OpType::GATHER, std::move(work), {}, {in});
  }
  if (outputs.size() != 1 || outputs[0].size() != static_cast<size_t>(getSize())) {
    throw ConfigError(
        "cohort backend: gather: the root's gather list must hold one tensor per "
        "rank (" +
        std::to_string(getSize()) + ")");
  }
  std::vector<at::Tensor>& list = outputs[0];
  check_alike(list, in, op);
  at::Tensor flat = at::empty({getSize() * in.numel()}, in.options());
  auto work = comm_->gather(in_buf, buffer_of(flat, op),
                            {.root = root, .timeout = timeout_of(opts.timeout)});
  return wrap(c10d::OpType::GATHER, std::move(work), list, {in, flat},
              [list, flat] { copy_out(flat, list); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  const char* op = "scatter";
  const at::Tensor& out = single(outputs, op);
  const int root = checked_root(opts.rootRank, op);
  const Buffer out_buf = buffer_of(out, op);
  at::Tensor flat;
  Buffer in_buf{out_buf.dtype, nullptr, 0};
  if (getRank() == root) {
    if (inputs.size() != 1 || inputs[0].size() != static_cast<size_t>(getSize())) {
      throw ConfigError(
          "cohort backend: scatter: the root's scatter list must hold one tensor "
          "per rank (" +
          std::to_string(getSize()) + ")");
    }
    check_alike(inputs[0], out, op);
    flat = flat_cat(inputs[0]);
    in_buf = buffer_of(flat, op);
  } else if (!inputs.empty() && !inputs[0].empty()) {
    throw ConfigError("cohort backend: scatter: only the root (" + std::to_string(root) +
                      ") passes a scatter list");
  }
  auto work = comm_->scatter(in_buf, out_buf, {.root = root, .timeout = timeout_of(opts.timeout)});
  std::vector<at::Tensor> keep;
  if (flat.defined()) keep.push_back(flat);
  return wrap(c10d::OpType::SCATTER, std::move(work), outputs, std::move(keep));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes, const c10d::AllToAllOptions& opts) {
  const char* op = "all_to_all_single";
  const Buffer in = buffer_of(input, op), out = buffer_of(output, op);
  comm::AllToAllOptions o{.send_counts = element_counts(input_split_sizes, input, getSize(), op),
                          .recv_counts = element_counts(output_split_sizes, output, getSize(), op),
                          .timeout = timeout_of(opts.timeout)};
  try {
    auto work = comm_->all_to_all(in, out, o);
    return wrap(c10d::OpType::ALLTOALL_BASE, std::move(work), {output}, {input});
  } catch (const ConfigError& e) {
    throw ConfigError(std::string("cohort backend: ") + op + ": " + e.what());
  }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::alltoall(std::vector<at::Tensor>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllToAllOptions& opts) {
  const char* op = "all_to_all";
  const auto n = static_cast<size_t>(getSize());
  if (inputs.size() != n || outputs.size() != n) {
    throw ConfigError("cohort backend: all_to_all: both lists must hold one tensor per rank (" +
                      std::to_string(n) + ")");
  }
  comm::AllToAllOptions o{.timeout = timeout_of(opts.timeout)};
  for (size_t r = 0; r < n; ++r) {
    buffer_of(inputs[r], op);
    buffer_of(outputs[r], op);
    if (inputs[r].scalar_type() != inputs[0].scalar_type() ||
        outputs[r].scalar_type() != inputs[0].scalar_type()) {
      throw ConfigError("cohort backend: all_to_all: every tensor must have one element type");
    }
    o.send_counts.push_back(static_cast<size_t>(inputs[r].numel()));
    o.recv_counts.push_back(static_cast<size_t>(outputs[r].numel()));
  }
  at::Tensor in_flat = flat_cat(inputs), out_flat = at::empty_like(flat_cat(outputs));
  auto work = comm_->all_to_all(buffer_of(in_flat, op), buffer_of(out_flat, op), o);
  std::vector<at::Tensor> list = outputs;
  return wrap(c10d::OpType::ALLTOALL, std::move(work), outputs, {in_flat, out_flat},
              [list, out_flat] { copy_out(out_flat, list); });
}

}  // namespace cohort::dist
