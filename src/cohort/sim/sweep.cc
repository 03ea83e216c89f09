#include "cohort/sim/sweep.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace cohort::sim {
namespace {

bool same(const Choice& a, const Choice& b) {
  return a.algorithm == b.algorithm && a.bucket_mb == b.bucket_mb &&
         a.compression.method == b.compression.method && a.sync == b.sync &&
         (a.sync == SyncMode::Allreduce || a.period == b.period) && a.transport == b.transport;
}

}  // namespace

std::string describe(const Choice& c) {
  char mb[32];
  std::snprintf(mb, sizeof mb, "%g", c.bucket_mb);
  std::string s = std::string(comm::algorithm_name(c.algorithm)) + ", " + mb + " MiB buckets, " +
                  std::string(compress::method_name(c.compression.method));
  if (c.sync == SyncMode::LocalSgd) {
    s += ", local_sgd every " + std::to_string(c.period);
  } else {
    s += ", allreduce";
  }
  return s;
}

SweepWorld sweep(const Profile& profile, const Layout& layout, const Choice& job,
                 const SweepOptions& options) {
  SweepWorld w;
  w.layout = layout;
  auto add = [&](const Choice& c, const std::string& varied) {
    for (const SweepRow& r : w.rows) {
      if (same(r.choice, c)) return;
    }
    w.rows.push_back(SweepRow{.layout = layout, .choice = c, .prediction = simulate(profile, layout, c),
                              .varied = varied});
    if (w.rows.back().prediction.step_s < w.rows[w.best].prediction.step_s) w.best = w.rows.size() - 1;
  };
  add(job, "job");
  if (options.only_job || layout.workers == 1) return w;
  const bool hierarchical = layout.hosts() > 1 && std::min(layout.ranks_per_host, layout.workers) > 1;
  std::vector<comm::Algorithm> algorithms = {comm::Algorithm::Auto, comm::Algorithm::Ring,
                                             comm::Algorithm::HalvingDoubling};
  if (hierarchical) algorithms.push_back(comm::Algorithm::Hierarchical);
  Choice base = w.rows[w.best].choice;
  base.sync = SyncMode::Allreduce;
  for (comm::Algorithm a : algorithms) {
    Choice c = base;
    c.algorithm = a;
    add(c, "algorithm");
  }
  auto best_allreduce = [&] {
    size_t b = 0;
    for (size_t i = 0; i < w.rows.size(); ++i) {
      if (w.rows[i].choice.sync == SyncMode::Allreduce &&
          (w.rows[b].choice.sync != SyncMode::Allreduce ||
           w.rows[i].prediction.step_s < w.rows[b].prediction.step_s)) {
        b = i;
      }
    }
    return w.rows[b].choice;
  };
  base = best_allreduce();
  std::vector<double> buckets = options.bucket_mb;
  buckets.push_back(job.bucket_mb);
  for (double mb : buckets) {
    Choice c = base;
    c.bucket_mb = mb;
    add(c, "bucket");
  }
  if (options.codecs) {
    base = best_allreduce();
    for (compress::Method m : {compress::Method::None, compress::Method::Fp16, compress::Method::Bf16,
                               compress::Method::Int8, compress::Method::TopK, compress::Method::PowerSgd}) {
      if (m != compress::Method::None && !profile.codecs.count(compress::method_name(m))) continue;
      const bool encoded =
          m == compress::Method::Fp16 || m == compress::Method::Bf16 || m == compress::Method::Int8;
      if (encoded && layout.workers > kMaxEncodedWorkers) continue;  // step.h
      Choice c = base;
      c.compression.method = m;
      add(c, "codec");
    }
  }
  if (options.local_sgd) {
    Choice c = best_allreduce();
    c.sync = SyncMode::LocalSgd;
    c.period = job.sync == SyncMode::LocalSgd ? job.period : 8;
    add(c, "sync");
  }
  return w;
}

}  // namespace cohort::sim
