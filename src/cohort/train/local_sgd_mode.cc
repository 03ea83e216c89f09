// sync.mode local_sgd: post-local SGD (Lin et al., "Don't Use Large Mini-Batches, Use Local SGD",
// ICLR'20; PyTorch's PostLocalSGDOptimizer with PeriodicModelAverager).
//
// The first sync.warmup_steps steps are synchronous (DDP's gradient allreduce). After them each
// worker steps on its own gradients and the replicas' parameters are averaged every sync.period
// steps: one allreduce of the model per period instead of one of the gradients per step. With
// an outer optimizer (DiLoCo, Douillard et al. 2023) the average is not taken as it is: the
// change since the last average, anchor - average, is an outer gradient that SGD (or Nesterov)
// momentum applies to the anchor, and every replica continues from the result.
//
// The inner optimizer's state (momentum buffers) stays each worker's own, as in PyTorch. With
// SGD and any momentum the average of the replicas after one local step equals the synchronous
// step (SGD with momentum is linear in the gradients), so period 1 gives allreduce's parameters
// to float rounding (tests/e2e/sync_test.cc).
#include <torch/serialize.h>
#include <torch/torch.h>

#include <sstream>

#include "cohort/base/error.h"
#include "cohort/ddp/distributed_data_parallel.h"
#include "cohort/train/sync_mode.h"

namespace cohort::train {
namespace {

class LocalSgdMode final : public SyncMode {
 public:
  explicit LocalSgdMode(const ModeParts& parts) : p_(parts), cfg_(parts.config.sync) {
    const OuterOptimizerConfig& o = cfg_.outer_optimizer;
    if (o.name == OuterOptimizerKind::None) return;
    torch::NoGradGuard no_grad;
    for (auto& param : p_.model.parameters()) {
      if (param.requires_grad()) anchors_.push_back(param.detach().clone().requires_grad_(true));
    }
    outer_ = std::make_unique<torch::optim::SGD>(
        anchors_, torch::optim::SGDOptions(o.lr)
                      .momentum(o.momentum)
                      .nesterov(o.name == OuterOptimizerKind::Nesterov && o.momentum > 0));
  }

  StepSync step(const torch::Tensor& loss, int64_t step) override {
    const double waited_before = p_.ddp.stats().wait_seconds;
    if (step < cfg_.warmup_steps) {
      p_.phase(comm::Phase::Backward);
      p_.ddp.backward(loss);
      const int64_t synced_us = comm::now_us();
      p_.phase(comm::Phase::Optimizer);
      p_.optimizer.step();
      anchors_stale_ = true;
      return {.wait_s = p_.ddp.stats().wait_seconds - waited_before, .synced_us = synced_us};
    }
    if (anchors_stale_) reset_anchors();
    p_.phase(comm::Phase::Backward);
    loss.backward();  // outside DDP's control: the gradients stay this worker's
    p_.phase(comm::Phase::Optimizer);
    p_.optimizer.step();
    agree_ = false;
    ++local_steps_;
    const int64_t completed = step + 1;
    if ((completed - cfg_.warmup_steps) % cfg_.period == 0) {
      average();
      averaged_at_ = completed;
    }
    return {.wait_s = p_.ddp.stats().wait_seconds - waited_before, .synced_us = comm::now_us()};
  }

  bool replicas_agree() const override { return agree_; }

  // Evaluation, checkpoints and the end need one model: a plain average. The outer step stays the
  // period's (an extra one would add a momentum step wherever an evaluation or a checkpoint
  // falls), and so does its anchor: the next scheduled average steps from it as usual.
  void synchronize() override {
    if (agree_) return;
    p_.phase(comm::Phase::Averaging);
    p_.ddp.average_parameters();
    ++averagings_;
    agree_ = true;
  }

  bool commit_due(int64_t completed) const override {
    if (completed <= cfg_.warmup_steps) {
      return completed % p_.config.elastic.snapshot_every_steps == 0;
    }
    return averaged_at_ == completed;
  }

  // The outer optimizer's momentum and, once the local steps began, the anchor: a checkpoint
  // taken mid-period (after a plain average) resumes stepping from the same anchor.
  std::string save_state() const override {
    if (!outer_) return {};
    torch::serialize::OutputArchive archive, outer;
    outer_->save(outer);
    archive.write("outer", outer);
    archive.write("anchors",
                  torch::tensor(static_cast<int64_t>(anchors_stale_ ? 0 : anchors_.size())));
    if (!anchors_stale_) {
      for (size_t i = 0; i < anchors_.size(); ++i) {
        archive.write("anchor_" + std::to_string(i), anchors_[i].detach(), /*is_buffer=*/true);
      }
    }
    std::ostringstream out;
    archive.save_to(out);
    return out.str();
  }

  void load_state(const std::string& state) override {
    anchors_stale_ = true;
    if (!outer_ || state.empty()) return;
    torch::serialize::InputArchive archive;
    archive.load_from(state.data(), state.size());
    torch::serialize::InputArchive outer;
    if (!archive.try_read("outer", outer)) {
      outer_->load(archive);  // written before anchors were kept: the optimizer's alone
      return;
    }
    outer_->load(outer);
    torch::Tensor count;
    archive.read("anchors", count);
    if (count.item<int64_t>() == 0) return;
    if (count.item<int64_t>() != static_cast<int64_t>(anchors_.size())) {
      throw Error("local SGD state of " + std::to_string(count.item<int64_t>()) +
                  " anchors for a model of " + std::to_string(anchors_.size()) + " parameters");
    }
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < anchors_.size(); ++i) {
      torch::Tensor a;
      archive.read("anchor_" + std::to_string(i), a, /*is_buffer=*/true);
      if (!a.sizes().equals(anchors_[i].sizes())) {
        throw Error("local SGD state: anchor " + std::to_string(i) + " of another shape");
      }
      anchors_[i].copy_(a);
    }
    anchors_stale_ = false;
  }

  nlohmann::json summary() const override {
    nlohmann::json s = {{"averagings", averagings_}, {"local_steps", local_steps_}};
    if (outer_) s["outer_steps"] = outer_steps_;
    return s;
  }

 private:
  // The replicas agree here: the anchor of the outer step is the model as it is.
  void reset_anchors() {
    anchors_stale_ = false;
    if (!outer_) return;
    torch::NoGradGuard no_grad;
    size_t i = 0;
    for (auto& param : p_.model.parameters()) {
      if (param.requires_grad()) anchors_[i++].copy_(param.detach());
    }
  }

  void average() {
    p_.phase(comm::Phase::Averaging);
    p_.ddp.average_parameters();
    ++averagings_;
    agree_ = true;
    if (!outer_) return;
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> params;
    for (auto& param : p_.model.parameters()) {
      if (param.requires_grad()) params.push_back(param);
    }
    // The outer gradient: how far the average moved away from the anchor, reversed.
    for (size_t i = 0; i < params.size(); ++i) {
      anchors_[i].mutable_grad() = anchors_[i].detach() - params[i].detach();
    }
    outer_->step();
    ++outer_steps_;
    for (size_t i = 0; i < params.size(); ++i) params[i].copy_(anchors_[i].detach());
  }

  ModeParts p_;
  const SyncConfig& cfg_;
  std::vector<torch::Tensor> anchors_;  // the model at the last average (outer optimizer only)
  std::unique_ptr<torch::optim::SGD> outer_;
  bool anchors_stale_ = true;
  bool agree_ = true;
  int64_t averaged_at_ = -1;
  int64_t averagings_ = 0, local_steps_ = 0, outer_steps_ = 0;
};

}  // namespace

std::unique_ptr<SyncMode> make_local_sgd_mode(const ModeParts& parts) {
  return std::make_unique<LocalSgdMode>(parts);
}

}  // namespace cohort::train
