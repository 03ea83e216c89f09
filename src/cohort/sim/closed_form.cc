#include "cohort/sim/closed_form.h"

#include <algorithm>
#include <cmath>

#include "cohort/comm/algorithms.h"
#include "cohort/sim/plan.h"
#include "cohort/sim/program.h"

namespace cohort::sim {
namespace {

int power_below(int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

// The fold and unfold of a world that is not a power of two: one whole buffer each way.
double fold_s(int n, double bytes, const Costs& c) {
  return n == power_below(n) ? 0 : 2 * (c.alpha + bytes * c.beta) + bytes * c.gamma;
}

double flat_s(comm::Algorithm a, int n, double bytes, const Costs& c) {
  switch (a) {
    case comm::Algorithm::HalvingDoubling:
      return halving_doubling_allreduce_s(n, bytes, c);
    case comm::Algorithm::RecursiveDoubling:
      return recursive_doubling_allreduce_s(n, bytes, c);
    case comm::Algorithm::Linear:
      return linear_allreduce_s(n, bytes, c);
    default:
      return ring_allreduce_s(n, bytes, c);
  }
}

}  // namespace

double ring_allreduce_s(int n, double bytes, const Costs& c) {
  if (n <= 1) return 0;
  const double k = n - 1;
  return 2 * k * c.alpha + 2 * k / n * bytes * c.beta + k / n * bytes * c.gamma;
}

double halving_doubling_allreduce_s(int n, double bytes, const Costs& c) {
  if (n <= 1) return 0;
  const int p = power_below(n);
  const double steps = std::log2(p), f = (p - 1.0) / p;
  return 2 * steps * c.alpha + 2 * f * bytes * c.beta + f * bytes * c.gamma + fold_s(n, bytes, c);
}

double recursive_doubling_allreduce_s(int n, double bytes, const Costs& c) {
  if (n <= 1) return 0;
  const int p = power_below(n);
  return std::log2(p) * (c.alpha + bytes * c.beta + bytes * c.gamma) + fold_s(n, bytes, c);
}

double linear_allreduce_s(int n, double bytes, const Costs& c) {
  if (n <= 1) return 0;
  const double k = n - 1;
  return 2 * k * (c.alpha + bytes * c.beta) + k * bytes * c.gamma;
}

double closed_form_step_s(const Profile& p, const Layout& l, const Choice& choice) {
  const Compute& c = p.compute;
  const std::vector<int> host_of = hosts_of(l);
  const int n = l.workers, hosts = l.hosts(), local = std::min(l.ranks_per_host, n);
  const int sharing = l.one_machine ? n : local;
  const double slow =
      (c.on_device ? 1.0 : std::max(1.0, static_cast<double>(sharing) * c.threads / p.cores)) *
      compute_slowdown(p, l);
  const LinkCost& within = within_host_link(p, choice);
  LinkCost across = p.network;
  if (l.link_bytes_per_s) across.bytes_per_s = *l.link_bytes_per_s;
  if (l.link_latency_s) across.latency_s = *l.link_latency_s;
  const double gamma = c.on_device ? 1 / p.reduce_bytes_per_s : slow / p.reduce_bytes_per_s;
  const double load = threads_per_core(p, l);
  const Costs in_host{within.latency_s + receiver_wait_s(within, load), slow / within.bytes_per_s,
                      gamma};
  const Costs net{across.latency_s + receiver_wait_s(p.network, load), 1 / across.bytes_per_s,
                  gamma};
  // Bytes on the wire per byte of f32 for a codec (the closed form knows no codec's schedule).
  double wire = 1;
  switch (choice.compression.method) {
    case compress::Method::Fp16:
    case compress::Method::Bf16:
      wire = 0.5;
      break;
    case compress::Method::Int8:
      wire = 0.25;
      break;
    case compress::Method::TopK:
      wire = 2 * choice.compression.topk_ratio * n;
      break;
    case compress::Method::PowerSgd:
      wire = 0.05;
      break;
    case compress::Method::None:
      break;
  }
  auto collective = [&](double bytes) {
    if (n == 1) return 0.0;
    const double b = bytes * (bytes >= choice.compression.min_bytes ? wire : 1);
    const comm::Algorithm a =
        resolve_algorithm(choice.algorithm, static_cast<size_t>(bytes), host_of,
                          shared_memory_within_host(p, choice), p.cores);
    if (a == comm::Algorithm::Hierarchical && hosts > 1 && local > 1) {
      // Within the host (a ring's halves over L ranks), across the hosts (L pieces at once
      // sharing each host's link), within again.
      const double piece = b / local;
      const Costs shared{net.alpha, net.beta * local, net.gamma};
      const double ring_half = (local - 1) * (in_host.alpha + piece * in_host.beta);
      return 2 * ring_half + local * piece * in_host.gamma +
             flat_s(comm::choose_allreduce(static_cast<size_t>(piece),
                                           {.size = hosts, .hosts = hosts}),
                    hosts, piece, shared);
    }
    const Costs& costs = hosts > 1 ? net : in_host;
    // Avg divides what each rank holds once reduced: a block of the ring's and halving-doubling's,
    // the whole buffer of recursive doubling's and of the linear allreduce's rank 0.
    const bool whole = a == comm::Algorithm::RecursiveDoubling || a == comm::Algorithm::Linear;
    const double divided = whole ? b : b / n;
    return flat_s(a, n, b, costs) + divided * costs.gamma;
  };
  const double compute = c.step_s() * slow;
  if (choice.sync == SyncMode::LocalSgd && n > 1) {
    const double avg = collective(static_cast<double>(c.gradient_bytes()));
    return compute + avg / std::max(1, choice.period);
  }
  double comm_free = 0, done = 0;
  for (const auto& bucket : buckets_of(c, choice.bucket_mb)) {
    double bytes = 0, ready = 0;
    for (size_t i : bucket) {
      bytes += static_cast<double>(c.gradients[i].bytes);
      ready = std::max(ready, c.gradients[i].ready_s);
    }
    done = std::max(done, ready);
    comm_free = std::max(comm_free, (c.data_s + c.forward_s + done) * slow) + collective(bytes);
  }
  const double backward_end = (c.data_s + c.forward_s + c.backward_s) * slow;
  return compute + std::max(0.0, comm_free - backward_end);
}

}  // namespace cohort::sim
