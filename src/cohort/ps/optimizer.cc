#include "cohort/ps/optimizer.h"

#include <cmath>

#include "cohort/base/error.h"

namespace cohort::ps {
namespace {

void sgd_step(const OptimizerSettings& s, OptimizerState& st, std::span<float> p,
              std::span<const float> grad, double lr) {
  const auto wd = static_cast<float>(s.weight_decay);
  const auto mom = static_cast<float>(s.momentum);
  const auto step = static_cast<float>(-lr);
  const bool first = st.steps == 0;
  if (mom != 0 && st.first.size() != p.size()) st.first.assign(p.size(), 0.0f);
  for (size_t i = 0; i < p.size(); ++i) {
    float g = grad[i];
    if (wd != 0) g += wd * p[i];
    if (mom != 0) {
      float& buf = st.first[i];
      buf = first ? g : mom * buf + g;
      g = s.nesterov ? g + mom * buf : buf;
    }
    p[i] += step * g;
  }
  ++st.steps;
}

void adam_step(const OptimizerSettings& s, OptimizerState& st, std::span<float> p,
               std::span<const float> grad, double lr) {
  if (st.first.size() != p.size()) st.first.assign(p.size(), 0.0f);
  if (st.second.size() != p.size()) st.second.assign(p.size(), 0.0f);
  ++st.steps;
  const double bc1 = 1 - std::pow(s.beta1, static_cast<double>(st.steps));
  const double bc2 = 1 - std::pow(s.beta2, static_cast<double>(st.steps));
  const auto b1 = static_cast<float>(s.beta1), b2 = static_cast<float>(s.beta2);
  const auto wd = static_cast<float>(s.weight_decay);
  const auto eps = static_cast<float>(s.eps);
  const auto step_size = static_cast<float>(lr / bc1);
  const auto sqrt_bc2 = static_cast<float>(std::sqrt(bc2));
  for (size_t i = 0; i < p.size(); ++i) {
    float g = grad[i];
    if (wd != 0) g += wd * p[i];
    float& m = st.first[i];
    float& v = st.second[i];
    m = m * b1 + (1 - b1) * g;
    v = v * b2 + (1 - b2) * g * g;
    const float denom = std::sqrt(v) / sqrt_bc2 + eps;
    p[i] -= step_size * m / denom;
  }
}

}  // namespace

void optimizer_step(const OptimizerSettings& s, OptimizerState& state, std::span<float> params,
                    std::span<const float> grad, double lr) {
  if (grad.size() != params.size()) throw Error("optimizer step: gradient and parameters differ");
  switch (s.kind) {
    case OptimizerKind::Sgd:
      return sgd_step(s, state, params, grad, lr);
    case OptimizerKind::Adam:
      return adam_step(s, state, params, grad, lr);
  }
  throw Error("unknown parameter-server optimizer");
}

std::string optimizer_name(OptimizerKind k) {
  return k == OptimizerKind::Adam ? "adam" : "sgd";
}

}  // namespace cohort::ps
