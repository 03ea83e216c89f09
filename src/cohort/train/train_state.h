// What the training loop commits and restores: the step, the sampler's position and the sample
// counts that prove each sample of an epoch was trained on once (trainer.h, "Fault tolerance").
#pragma once

#include <cstdint>
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

}  // namespace cohort::train
