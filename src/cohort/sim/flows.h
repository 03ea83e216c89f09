// FlowNet: how concurrent work shares what it runs on, in simulated time.
//
// A resource has a capacity in units per second: a host's link to the network carries bytes per
// second each way, a host's CPU cores core-seconds per second. A flow is an amount of progress
// (bytes of a transfer, core-seconds of a computation) made at a rate of at most `cap`, using each
// of its resources at `coef` units per unit of progress. Rates are max-min fair in proportion to
// what they take of the resources: every flow rises until a resource it shares is full or it reaches
// its cap (progressive filling), each at the pace that gives every flow the same share of the
// resource it leans on most. So two transfers on one link get half of it each (one that is held
// back elsewhere leaves the rest to the other), and a computation and a copy on one core get half a
// core each.
//
// Filling is local: when a flow starts or ends, the flows that share a resource with it are
// filled again, with what the other flows use of their other resources held fixed. That is the
// exact max-min allocation whenever the flows of a resource do not also share a second resource
// with unaffected flows, which is how collectives load a cluster (each link's flows belong to
// one step); it keeps one event's cost to the handful of flows it touches, so a step of thousands
// of ranks simulates in seconds.
#pragma once

#include <cstdint>
#include <queue>
#include <string>
#include <vector>

namespace cohort::sim {

class FlowNet {
 public:
  using Id = uint32_t;
  struct Use {
    uint32_t resource = 0;
    double coef = 1;  // units of the resource per unit of the flow's progress
  };

  uint32_t add_resource(double capacity);
  double capacity(uint32_t resource) const { return resources_[resource].capacity; }
  // Units used so far (integrated over time, up to the last event that touched the resource).
  double used(uint32_t resource) const { return resources_[resource].used; }

  // A flow of `amount` units (> 0) starting at `now`, at most `cap` units per second; `tag` is
  // the caller's, returned when it finishes.
  Id start(double now, double amount, double cap, const std::vector<Use>& uses, uint64_t tag);

  // The time of the next flow to finish (infinity when none is running).
  double next_finish();
  // Finishes the next flow (at next_finish(), which must be finite) and returns its tag.
  uint64_t finish_next();

  size_t running() const { return running_; }

 private:
  struct Resource {
    double capacity = 0;
    double used = 0;           // integrated usage
    std::vector<Id> flows;     // running flows on it
  };
  struct Flow {
    double remaining = 0;
    double rate = 0;
    double last = 0;  // time of the last settle
    double cap = 0;
    std::vector<Use> uses;
    uint64_t tag = 0;
    uint32_t version = 0;
    bool running = false;
    bool due = false;  // an event of this version is queued
  };
  struct Due {
    double at;
    Id id;
    uint32_t version;
    bool operator>(const Due& o) const { return at > o.at || (at == o.at && id > o.id); }
  };

  void settle(Flow& f, double now);
  void refill(double now, const std::vector<Use>& touched);
  void schedule(Id id);

  std::vector<Resource> resources_;
  std::vector<Flow> flows_;
  std::vector<Id> free_;
  std::priority_queue<Due, std::vector<Due>, std::greater<>> due_;
  size_t running_ = 0;
  double now_ = 0;
  // Scratch of refill(), kept to spare allocations.
  struct Local {
    uint32_t resource;
    double avail;
    double demand;  // sum over unfrozen flows of coef * weight
  };
  struct Filling {
    Id id;
    size_t first = 0;   // its uses' local indices: at_[first ...]
    double weight = 1;  // rate per unit of the fill level
    double rate = 0;
    bool frozen = false;
  };
  std::vector<Local> local_;
  std::vector<Filling> fill_;
  std::vector<size_t> at_;
  std::vector<Id> affected_;
  std::vector<uint32_t> stamp_;
  uint32_t epoch_ = 0;
};

}  // namespace cohort::sim
