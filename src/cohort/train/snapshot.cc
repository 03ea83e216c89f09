#include "cohort/train/snapshot.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <mutex>
#include <typeinfo>

#include "cohort/base/error.h"

namespace cohort::train {
namespace {

using torch::optim::AdamParamState;
using torch::optim::OptimizerParamState;
using torch::optim::SGDParamState;

// dst becomes a copy of src that shares nothing with it: copied into dst's own storage when the
// shapes match, a new tensor otherwise.
void assign(torch::Tensor& dst, const torch::Tensor& src) {
  if (!src.defined()) {
    dst = torch::Tensor();
  } else if (dst.defined() && dst.sizes().equals(src.sizes()) && dst.dtype() == src.dtype()) {
    dst.copy_(src);
  } else {
    dst = src.clone();
  }
}

// Copies src's fields into dst, a state of the same optimizer type, tensors included.
bool copy_state(OptimizerParamState& dst, const OptimizerParamState& src) {
  if (typeid(dst) != typeid(src)) return false;
  if (auto* s = dynamic_cast<const SGDParamState*>(&src)) {
    assign(static_cast<SGDParamState&>(dst).momentum_buffer(), s->momentum_buffer());
    return true;
  }
  if (auto* s = dynamic_cast<const AdamParamState*>(&src)) {
    auto& d = static_cast<AdamParamState&>(dst);
    d.step(s->step());
    assign(d.exp_avg(), s->exp_avg());
    assign(d.exp_avg_sq(), s->exp_avg_sq());
    assign(d.max_exp_avg_sq(), s->max_exp_avg_sq());
    return true;
  }
  throw Error(std::string("in-memory snapshots cannot copy the optimizer state ") +
              typeid(src).name() + " (SGD and Adam only)");
}

// A copy of src that shares no tensor with it (OptimizerParamState::clone() shares them).
std::unique_ptr<OptimizerParamState> deep_copy(const OptimizerParamState& src) {
  std::unique_ptr<OptimizerParamState> c = src.clone();
  if (auto* s = dynamic_cast<SGDParamState*>(c.get())) {
    s->momentum_buffer(torch::Tensor());
  } else if (auto* a = dynamic_cast<AdamParamState*>(c.get())) {
    a->exp_avg(torch::Tensor()).exp_avg_sq(torch::Tensor()).max_exp_avg_sq(torch::Tensor());
  }
  copy_state(*c, src);
  return c;
}

std::vector<torch::Tensor> model_tensors(torch::nn::Module& model) {
  std::vector<torch::Tensor> t = model.parameters();
  for (auto& b : model.buffers()) t.push_back(b);
  return t;
}

// The optimizer's state map is keyed by the parameter's TensorImpl, as torch::optim does.
std::string state_key(const torch::Tensor& p) {
  return c10::guts::to_string(p.unsafeGetTensorImpl());
}

}  // namespace

void StateCopy::capture(torch::nn::Module& model, torch::optim::Optimizer* optimizer) {
  torch::NoGradGuard no_grad;
  const std::vector<torch::Tensor> live = model_tensors(model);
  tensors_.resize(live.size());
  for (size_t i = 0; i < live.size(); ++i) assign(tensors_[i], live[i]);
  options_.clear();
  size_t slot = 0;
  if (optimizer) {
    auto& state = optimizer->state();
    for (auto& group : optimizer->param_groups()) {
      options_.push_back(group.options().clone());
      for (const auto& p : group.params()) {
        if (slot == states_.size()) states_.emplace_back();
        auto& mine = states_[slot++];
        auto it = state.find(state_key(p));
        if (it == state.end()) {
          mine.reset();
        } else if (!mine || !copy_state(*mine, *it->second)) {
          mine = deep_copy(*it->second);
        }
      }
    }
  }
  states_.resize(slot);
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  rng_ = gen.get_state();
}

void StateCopy::restore(torch::nn::Module& model, torch::optim::Optimizer* optimizer) const {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> live = model_tensors(model);
  if (live.size() != tensors_.size()) {
    throw Error("a snapshot of " + std::to_string(tensors_.size()) +
                " tensors restored into a model of " + std::to_string(live.size()));
  }
  for (size_t i = 0; i < live.size(); ++i) live[i].copy_(tensors_[i]);
  if (optimizer) {
    auto& groups = optimizer->param_groups();
    if (groups.size() != options_.size()) throw Error("a snapshot of another optimizer restored");
    auto& state = optimizer->state();
    size_t slot = 0;
    for (size_t g = 0; g < groups.size(); ++g) {
      groups[g].set_options(options_[g]->clone());
      for (const auto& p : groups[g].params()) {
        if (slot == states_.size()) throw Error("a snapshot of another optimizer restored");
        const auto& mine = states_[slot++];
        const std::string key = state_key(p);
        auto it = state.find(key);
        if (!mine) {
          if (it != state.end()) state.erase(it);
        } else if (it == state.end() || !copy_state(*it->second, *mine)) {
          state[key] = deep_copy(*mine);
        }
      }
    }
  }
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(rng_);
}

std::shared_ptr<StateCopy> Snapshots::recycle(int64_t step) {
  std::shared_ptr<StateCopy> c;
  if (!list_.empty() && list_.back().state.step == step) {
    c = std::move(list_.back().copy);  // take() replaces it
  } else if (list_.size() == 2) {
    c = std::move(list_.front().copy);  // take() drops it
  }
  return c ? c : std::make_shared<StateCopy>();
}

void Snapshots::take(Snapshot snap) {
  if (!list_.empty() && list_.back().state.step == snap.state.step) {
    list_.back() = std::move(snap);
    return;
  }
  list_.push_back(std::move(snap));
  if (list_.size() > 2) list_.pop_front();
}

void Snapshots::reset(Snapshot snap) {
  list_.clear();
  list_.push_back(std::move(snap));
}

void Snapshots::keep_only(int64_t step) {
  std::erase_if(list_, [&](const Snapshot& s) { return s.state.step != step; });
}

const Snapshot* Snapshots::find(int64_t step) const {
  auto it = std::find_if(list_.begin(), list_.end(),
                         [&](const Snapshot& s) { return s.copy && s.state.step == step; });
  return it == list_.end() ? nullptr : &*it;
}

}  // namespace cohort::train
