#include "cohort/train/evaluate.h"

#include <torch/torch.h>

#include <algorithm>
#include <vector>

namespace cohort::train {

Evaluation evaluate(Model& model, const Dataset& test, comm::Communicator& comm) {
  torch::NoGradGuard no_grad;
  model.eval();
  double sums[3] = {0, 0, 0};  // correct, count, loss sum
  const int64_t n = test.size(), world = comm.size();
  std::vector<int64_t> idx;
  for (int64_t i = comm.rank(); i < n; i += world) idx.push_back(i);
  const size_t chunk = 1000;
  for (size_t off = 0; off < idx.size(); off += chunk) {
    std::vector<int64_t> part(idx.begin() + off, idx.begin() + std::min(idx.size(), off + chunk));
    auto [x, y] = test.batch(part);
    auto logits = model.forward(x);
    sums[0] += logits.argmax(1).eq(y).sum().item<double>();
    sums[1] += static_cast<double>(part.size());
    sums[2] +=
        torch::nn::functional::cross_entropy(
            logits, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
            .item<double>();
  }
  comm.allreduce(Buffer{DType::F64, sums, 3}, {.op = comm::ReduceOp::Sum})->wait();
  model.train();
  return {sums[1] > 0 ? sums[0] / sums[1] : 0, sums[1] > 0 ? sums[2] / sums[1] : 0};
}

}  // namespace cohort::train
