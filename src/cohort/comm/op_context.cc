// OpContext: how an algorithm's peer numbers become mesh ranks.
#include <algorithm>

#include "cohort/comm/algorithms.h"

namespace cohort::comm {

OpContext OpContext::within(const std::vector<int>& group) const {
  const auto me = std::find(group.begin(), group.end(), mesh.rank());
  if (me == group.end()) {
    throw Error("rank " + std::to_string(mesh.rank()) +
                " runs a group operation of a group it is not in");
  }
  OpContext sub = *this;
  sub.members = &group;
  sub.member_index = static_cast<int>(me - group.begin());
  return sub;
}

void OpContext::run(SendPlan* send, RecvPlan* recv) {
  auto go = [&] {
    if (plan) {
      plan->exchange(send, recv);
    } else {
      exchange(mesh, counters, id, send, recv, deadline, spin, fold_bytes);
    }
  };
  if (!members) {
    go();
    return;
  }
  // The plans name members; the exchange, mesh ranks. They are the caller's: put the members back
  // however the exchange ends.
  struct Translated {
    int* peer;
    int member;
    ~Translated() {
      if (peer) *peer = member;
    }
  };
  Translated s{send ? &send->peer : nullptr, send ? send->peer : 0};
  Translated r{recv ? &recv->peer : nullptr, recv ? recv->peer : 0};
  if (send) send->peer = mesh_rank(send->peer);
  if (recv) recv->peer = mesh_rank(recv->peer);
  go();
}

}  // namespace cohort::comm
