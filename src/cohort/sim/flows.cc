#include "cohort/sim/flows.h"

#include <algorithm>
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
  if (f.rate <= 0) return;  // starved until a resource it uses frees up
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
  struct Local {
    uint32_t resource;
    double avail;
    double demand;  // sum over unfrozen flows of coef * cap
  };
  std::vector<Local> local;
  auto index_of = [&](uint32_t r) {
    for (size_t i = 0; i < local.size(); ++i) {
      if (local[i].resource == r) return i;
    }
    double others = 0;
    for (Id g : resources_[r].flows) {
      if (stamp_[g] == epoch_) continue;
      for (const Use& u : flows_[g].uses) {
        if (u.resource == r) others += flows_[g].rate * u.coef;
      }
    }
    local.push_back(Local{.resource = r, .avail = std::max(0.0, resources_[r].capacity - others),
                          .demand = 0});
    return local.size() - 1;
  };
  struct Filling {
    Id id;
    double weight = 1;  // rate per unit of the fill level
    double rate = 0;
    bool frozen = false;
    std::vector<size_t> at;  // local index of each use
  };
  std::vector<Filling> fill;
  fill.reserve(affected_.size());
  for (Id id : affected_) {
    const Flow& f = flows_[id];
    Filling fl{.id = id};
    double coef = 0;
    for (const Use& u : f.uses) {
      fl.at.push_back(index_of(u.resource));
      coef = std::max(coef, u.coef);
    }
    fl.weight = coef > 0 ? 1 / coef : f.cap;
    fill.push_back(std::move(fl));
  }

  // Progressive filling: raise the level until a resource fills or a flow reaches its cap.
  size_t unfrozen = fill.size();
  while (unfrozen > 0) {
    for (Local& l : local) l.demand = 0;
    for (const Filling& fl : fill) {
      if (fl.frozen) continue;
      const Flow& f = flows_[fl.id];
      for (size_t k = 0; k < fl.at.size(); ++k) local[fl.at[k]].demand += f.uses[k].coef * fl.weight;
    }
    double step = std::numeric_limits<double>::infinity();
    for (const Local& l : local) {
      if (l.demand > 0) step = std::min(step, l.avail / l.demand);
    }
    for (const Filling& fl : fill) {
      if (!fl.frozen) step = std::min(step, (flows_[fl.id].cap - fl.rate) / fl.weight);
    }
    step = std::max(step, 0.0);
    for (Filling& fl : fill) {
      if (!fl.frozen) fl.rate += step * fl.weight;
    }
    for (Local& l : local) l.avail -= step * l.demand;
    for (Filling& fl : fill) {
      if (fl.frozen) continue;
      bool stop = fl.rate >= flows_[fl.id].cap * (1 - 1e-12);
      for (size_t k : fl.at) {
        const Local& l = local[k];
        if (l.demand > 0 && l.avail <= 1e-12 * resources_[l.resource].capacity) stop = true;
      }
      if (stop) {
        fl.frozen = true;
        --unfrozen;
      }
    }
  }
  for (const Filling& fl : fill) {
    Flow& f = flows_[fl.id];
    f.rate = std::min(fl.rate, f.cap);
    schedule(fl.id);
  }
}

}  // namespace cohort::sim
