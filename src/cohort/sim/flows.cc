#include "cohort/sim/flows.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "cohort/base/error.h"

namespace cohort::sim {

uint32_t FlowNet::add_resource(double capacity) {
  if (!(capacity > 0)) throw Error("flow network: a resource needs a positive capacity");
  resources_.push_back(Resource{.capacity = capacity});
  return static_cast<uint32_t>(resources_.size() - 1);
}

FlowNet::Id FlowNet::start(double now, double amount, double cap, const std::vector<Use>& uses,
                           uint64_t tag) {
  if (!(amount > 0) || !(cap > 0)) throw Error("flow network: a flow needs an amount and a cap");
  now_ = std::max(now_, now);
  Id id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else {
    id = static_cast<Id>(flows_.size());
    flows_.emplace_back();
    stamp_.push_back(0);
  }
  Flow& f = flows_[id];
  f.remaining = amount;
  f.rate = 0;
  f.last = now_;
  f.cap = cap;
  f.uses = uses;
  f.tag = tag;
  f.running = true;
  f.due = false;
  for (const Use& u : uses) resources_[u.resource].flows.push_back(id);
  ++running_;
  refill(now_, f.uses);
  if (uses.empty()) {  // nothing to share: at its cap
    f.rate = cap;
    schedule(id);
  }
  return id;
}

double FlowNet::next_finish() {
  while (!due_.empty()) {
    const Due& d = due_.top();
    const Flow& f = flows_[d.id];
    if (f.running && f.version == d.version) return d.at;
    due_.pop();
  }
  return std::numeric_limits<double>::infinity();
}

uint64_t FlowNet::finish_next() {
  if (next_finish() == std::numeric_limits<double>::infinity()) {
    throw Error("flow network: no flow is running");
  }
  const Due d = due_.top();
  due_.pop();
  now_ = std::max(now_, d.at);
  Flow& f = flows_[d.id];
  settle(f, now_);
  f.running = false;
  f.due = false;
  ++f.version;
  for (const Use& u : f.uses) {
    auto& v = resources_[u.resource].flows;
    auto it = std::find(v.begin(), v.end(), d.id);
    if (it != v.end()) {
      *it = v.back();
      v.pop_back();
    }
  }
  --running_;
  free_.push_back(d.id);
  const uint64_t tag = f.tag;
  refill(now_, f.uses);
  return tag;
}

void FlowNet::settle(Flow& f, double now) {
  const double dt = now - f.last;
  if (dt > 0 && f.rate > 0) {
    f.remaining -= f.rate * dt;
    for (const Use& u : f.uses) resources_[u.resource].used += f.rate * u.coef * dt;
  }
  if (f.remaining < 0) f.remaining = 0;
  f.last = now;
}

void FlowNet::schedule(Id id) {
  Flow& f = flows_[id];
  ++f.version;
  f.due = f.rate > 0;
  if (!f.due) return;  // starved until a resource it uses frees up
  due_.push(Due{.at = now_ + f.remaining / f.rate, .id = id, .version = f.version});
}

void FlowNet::refill(double now, const std::vector<Use>& touched) {
  // The flows that share a resource with the one that started or ended.
  ++epoch_;
  affected_.clear();
  for (const Use& u : touched) {
    for (Id id : resources_[u.resource].flows) {
      if (stamp_[id] == epoch_) continue;
      stamp_[id] = epoch_;
      affected_.push_back(id);
    }
  }
  if (affected_.empty()) return;
  for (Id id : affected_) settle(flows_[id], now);

  // Every resource the affected flows use, with what the other flows leave of it.
  local_.clear();
  auto index_of = [&](uint32_t r) {
    for (size_t i = 0; i < local_.size(); ++i) {
      if (local_[i].resource == r) return i;
    }
    double others = 0;
    for (Id g : resources_[r].flows) {
      if (stamp_[g] == epoch_) continue;
      for (const Use& u : flows_[g].uses) {
        if (u.resource == r) others += flows_[g].rate * u.coef;
      }
    }
    local_.push_back(Local{.resource = r, .avail = std::max(0.0, resources_[r].capacity - others),
                           .demand = 0});
    return local_.size() - 1;
  };
  fill_.clear();
  at_.clear();
  for (Id id : affected_) {
    const Flow& f = flows_[id];
    Filling fl{.id = id, .first = at_.size()};
    // The level is a share of the resource the flow leans on most (its use per unit of progress
    // over the resource's capacity), so that flows of different units compare: a copy and a
    // computation on one host's cores rise by the same fraction of the cores.
    double lean = 0;
    for (const Use& u : f.uses) {
      at_.push_back(index_of(u.resource));
      lean = std::max(lean, u.coef / resources_[u.resource].capacity);
    }
    fl.weight = lean > 0 ? 1 / lean : f.cap;
    fill_.push_back(fl);
  }

  // Progressive filling: raise the level until a resource fills or a flow reaches its cap.
  size_t unfrozen = fill_.size();
  while (unfrozen > 0) {
    for (Local& l : local_) l.demand = 0;
    for (const Filling& fl : fill_) {
      if (fl.frozen) continue;
      const Flow& f = flows_[fl.id];
      for (size_t k = 0; k < f.uses.size(); ++k) local_[at_[fl.first + k]].demand += f.uses[k].coef * fl.weight;
    }
    double step = std::numeric_limits<double>::infinity();
    for (const Local& l : local_) {
      if (l.demand > 0) step = std::min(step, l.avail / l.demand);
    }
    for (const Filling& fl : fill_) {
      if (!fl.frozen) step = std::min(step, (flows_[fl.id].cap - fl.rate) / fl.weight);
    }
    step = std::max(step, 0.0);
    for (Filling& fl : fill_) {
      if (!fl.frozen) fl.rate += step * fl.weight;
    }
    for (Local& l : local_) l.avail -= step * l.demand;
    for (Filling& fl : fill_) {
      if (fl.frozen) continue;
      const Flow& f = flows_[fl.id];
      bool stop = fl.rate >= f.cap * (1 - 1e-12);
      for (size_t k = 0; k < f.uses.size(); ++k) {
        const Local& l = local_[at_[fl.first + k]];
        if (l.demand > 0 && l.avail <= 1e-12 * resources_[l.resource].capacity) stop = true;
      }
      if (stop) {
        fl.frozen = true;
        --unfrozen;
      }
    }
  }
  for (const Filling& fl : fill_) {
    Flow& f = flows_[fl.id];
    const double rate = std::min(fl.rate, f.cap);
    // An unchanged rate keeps its finish time: its event stands.
    if (f.due && std::abs(rate - f.rate) <= 1e-12 * f.cap) continue;
    f.rate = rate;
    schedule(fl.id);
  }
}

}  // namespace cohort::sim
