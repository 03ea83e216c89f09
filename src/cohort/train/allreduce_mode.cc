// sync.mode allreduce: synchronous data parallelism. Gradients are averaged by DDP's bucketed
// allreduces while backward runs; every replica applies the same averaged gradient, so the
// replicas stay bitwise equal after every step.
#include <torch/torch.h>

#include "cohort/ddp/distributed_data_parallel.h"
#include "cohort/train/sync_mode.h"

namespace cohort::train {
namespace {

class AllReduceMode final : public SyncMode {
 public:
  explicit AllReduceMode(const ModeParts& parts) : p_(parts) {}

  StepSync step(const torch::Tensor& loss, int64_t /*step*/) override {
    const double waited_before = p_.ddp.stats().wait_seconds;
    p_.phase(comm::Phase::Backward);
    p_.ddp.backward(loss);
    const int64_t synced_us = comm::now_us();
    p_.phase(comm::Phase::Optimizer);
    p_.optimizer.step();
    return {.wait_s = p_.ddp.stats().wait_seconds - waited_before, .synced_us = synced_us};
  }
  bool replicas_agree() const override { return true; }
  void synchronize() override {}
  bool commit_due(int64_t completed) const override {
    return completed % p_.config.elastic.snapshot_every_steps == 0;
  }

 private:
  ModeParts p_;
};

}  // namespace

std::unique_ptr<SyncMode> make_allreduce_mode(const ModeParts& parts) {
  return std::make_unique<AllReduceMode>(parts);
}

}  // namespace cohort::train
