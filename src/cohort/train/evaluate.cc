#include "cohort/train/evaluate.h"

#include <torch/torch.h>

#include <algorithm>
#include <vector>

namespace cohort::train {

namespace {

// Correct predictions, examples and loss sum over test examples first, first + step, ...
void accumulate(Model& model, const Dataset& test, int64_t first, int64_t step, double sums[3]) {
  torch::NoGradGuard no_grad;
  model.eval();
  std::vector<int64_t> idx;
  for (int64_t i = first; i < test.size(); i += step) idx.push_back(i);
  // About a training batch at a time: with 1,000 the cnn's evaluations took 7.8-10x as long
  // (BENCHMARKS.md, "Evaluating on the test set").
  const size_t chunk = 128;
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
  model.train();
}

Evaluation result(const double sums[3]) {
  return {sums[1] > 0 ? sums[0] / sums[1] : 0, sums[1] > 0 ? sums[2] / sums[1] : 0};
}

}  // namespace

Evaluation evaluate(Model& model, const Dataset& test, comm::Communicator& comm) {
  double sums[3] = {0, 0, 0};  // correct, count, loss sum
  accumulate(model, test, comm.rank(), comm.size(), sums);
  comm.allreduce(Buffer{DType::F64, sums, 3}, {.op = comm::ReduceOp::Sum})->wait();
  return result(sums);
}

Evaluation evaluate(Model& model, const Dataset& test) {
  double sums[3] = {0, 0, 0};
  accumulate(model, test, 0, 1, sums);
  return result(sums);
}

}  // namespace cohort::train
