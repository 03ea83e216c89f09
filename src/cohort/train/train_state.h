// What the training loop commits and restores: the step, the sampler's position and the sample
// counts that prove each sample of an epoch was trained on once (trainer.h, "Fault tolerance").
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace cohort::train {

// The samples of one epoch trained on: how many, and the sum and sum of squares of their indices.
// After a full epoch they are N, N(N-1)/2 and (N-1)N(2N-1)/6 exactly when each sample of [0, N)
// was trained on once (doubles hold these integers exactly for any data set that fits in memory).
struct EpochCount {
  double samples = 0;
  double id_sum = 0;
  double id_sq_sum = 0;
};

// The replicated state outside the model and optimizer: the step, the sampler's position and the
// committed sample counts of every epoch.
struct TrainState {
  int64_t step = 0;
  int64_t epoch = 0;
  int64_t consumed = 0;
  std::vector<EpochCount> counts;

  nlohmann::json to_json() const {
    nlohmann::json c = nlohmann::json::array();
    for (const auto& e : counts) c.push_back({e.samples, e.id_sum, e.id_sq_sum});
    return {{"step", step}, {"epoch", epoch}, {"consumed", consumed}, {"counts", c}};
  }
  static TrainState from_json(const nlohmann::json& j) {
    TrainState s{.step = j.at("step").get<int64_t>(),
                 .epoch = j.at("epoch").get<int64_t>(),
                 .consumed = j.at("consumed").get<int64_t>(),
                 .counts = {}};
    for (const auto& c : j.at("counts")) {
      s.counts.push_back({c.at(0).get<double>(), c.at(1).get<double>(), c.at(2).get<double>()});
    }
    return s;
  }
};

// A committed state: TrainState plus the model, optimizer, generator and the synchronization
// mode's state (encode_checkpoint).
struct Snapshot {
  TrainState state;
  std::string bytes;
};

// The last two snapshots, the newest last: ranks are at most one commit apart when a collective
// fails, so the newest snapshot every rank holds is one of a rank's last two.
class Snapshots {
 public:
  // A second snapshot of the same step replaces the first.
  void take(Snapshot snap) {
    if (!list_.empty() && list_.back().state.step == snap.state.step) {
      list_.back() = std::move(snap);
      return;
    }
    list_.push_back(std::move(snap));
    if (list_.size() > 2) list_.pop_front();
  }
  // Only `snap` is kept (after a restore).
  void reset(Snapshot snap) {
    list_.clear();
    list_.push_back(std::move(snap));
  }
  const Snapshot* find(int64_t step) const {
    auto it = std::find_if(list_.begin(), list_.end(),
                           [&](const Snapshot& s) { return s.state.step == step; });
    return it == list_.end() ? nullptr : &*it;
  }
  bool empty() const { return list_.empty(); }
  const Snapshot& newest() const { return list_.back(); }

 private:
  std::deque<Snapshot> list_;
};

}  // namespace cohort::train
