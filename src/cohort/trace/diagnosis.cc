#include "cohort/trace/diagnosis.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

namespace cohort::trace {

using nlohmann::json;

namespace {

std::string strf(const char* f, auto... args) {
  const int n = std::snprintf(nullptr, 0, f, args...);
  if (n <= 0) return {};
  std::string out(static_cast<size_t>(n) + 1, '\0');
  std::snprintf(out.data(), out.size(), f, args...);
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string pct(double share) {
  return strf("%.0f%%", 100 * share);
}

std::string mb(double bytes) {
  return strf("%.1f MB", bytes / 1e6);
}

json breakdown_json(const RankBreakdown& b) {
  return {{"rank", b.rank},
          {"steps", b.steps},
          {"step_s", b.step_s},
          {"data_s", b.data_s},
          {"compute_s", b.compute_s},
          {"wait_s", b.wait_s},
          {"comm_s", b.comm_s},
          {"data_share", b.share(b.data_s)},
          {"compute_share", b.share(b.compute_s)},
          {"wait_share", b.share(b.wait_s)},
          {"comm_share", b.share(b.comm_s)},
          {"busbw_gbps", b.busbw_gbps},
          {"bytes_per_step", b.bytes_per_step}};
}

// LocalSgdEstimate over the steps every rank reported (`common`: step -> each rank's record).
std::optional<LocalSgdEstimate> estimate_local_sgd(
    const std::map<int64_t, std::map<int, StepRecord>>& common, double comm_s, int64_t period) {
  LocalSgdEstimate e{.period = period};
  double measured = 0, estimated = 0;
  std::vector<const std::map<int, StepRecord>*> window;
  int prev_epoch = -1;
  int64_t prev_step = -1;
  auto close_window = [&] {
    if (static_cast<int64_t>(window.size()) == period) {
      std::map<int, double> busy;
      for (const auto* step : window) {
        double longest = 0;
        for (const auto& [rank, rec] : *step) {
          busy[rank] += rec.busy_s();
          longest = std::max(longest, rec.step_s());
        }
        measured += longest;
      }
      double slowest = 0;
      for (const auto& [rank, b] : busy) slowest = std::max(slowest, b);
      estimated += slowest + comm_s;
      e.steps += period;
    }
    window.clear();
  };
  for (const auto& [step, recs] : common) {
    const int epoch = recs.begin()->second.epoch;
    if (epoch != prev_epoch || step != prev_step + 1) close_window();
    window.push_back(&recs);
    if (static_cast<int64_t>(window.size()) == period) close_window();
    prev_epoch = epoch;
    prev_step = step;
  }
  if (e.steps == 0) return std::nullopt;
  e.measured_s = measured / static_cast<double>(e.steps);
  e.local_sgd_s = estimated / static_cast<double>(e.steps);
  return e;
}

// SspEstimate over the steps every rank reported, in order. A rank's step k ends when it has
// pushed clock k (its own work and one exchange after its previous step, and not before every
// rank finished step k - staleness - 1); the servers then hold its answer until every rank has
// pushed clock k, for at most fresh_wait of its own mean step (sync.fresh_wait).
std::optional<SspEstimate> estimate_ssp(const std::map<int64_t, std::map<int, StepRecord>>& common,
                                        double comm_s, int64_t staleness, double fresh_wait) {
  if (common.empty()) return std::nullopt;
  SspEstimate e{.staleness = staleness, .fresh_wait = fresh_wait};
  std::map<int, double> own_step;  // rank -> its mean step without waiting: what fresh_wait scales
  for (const auto& [step, recs] : common) {
    for (const auto& [rank, rec] : recs) own_step[rank] += rec.busy_s() + comm_s;
  }
  for (auto& [rank, s] : own_step) s /= static_cast<double>(common.size());
  std::map<int, std::vector<double>> end;  // rank -> when each of its steps ends
  double measured = 0;
  for (const auto& [step, recs] : common) {
    const auto k = static_cast<size_t>(e.steps);
    // Every rank must have finished step k - staleness - 1 before any starts step k.
    double gate = 0;
    if (k >= static_cast<size_t>(staleness) + 1) {
      for (const auto& [rank, ends] : end) gate = std::max(gate, ends[k - staleness - 1]);
    }
    std::map<int, double> pushed;
    double complete = 0;  // when the last rank pushed clock k
    double longest = 0;
    for (const auto& [rank, rec] : recs) {
      const std::vector<double>& ends = end[rank];
      const double own = ends.empty() ? 0 : ends.back();
      pushed[rank] = std::max(own, gate) + rec.busy_s() + comm_s;
      complete = std::max(complete, pushed[rank]);
      longest = std::max(longest, rec.step_s());
    }
    for (const auto& [rank, at] : pushed) {
      end[rank].push_back(std::max(at, std::min(at + fresh_wait * own_step[rank], complete)));
    }
    measured += longest;
    ++e.steps;
  }
  double last = 0;
  for (const auto& [rank, ends] : end) last = std::max(last, ends.back());
  e.measured_s = measured / static_cast<double>(e.steps);
  e.ssp_s = last / static_cast<double>(e.steps);
  return e;
}

}  // namespace

Diagnosis diagnose_run(const std::vector<RankSteps>& ranks, const JobFacts& job,
                       const RunOutcome& outcome) {
  Diagnosis d;
  d.job = job;
  d.outcome = outcome;

  // The newest record of each step per rank (a rollback repeats steps), and each step's world.
  std::map<int, std::map<int64_t, StepRecord>> by_rank;
  std::map<int, int64_t> offsets;
  for (const RankSteps& r : ranks) {
    auto& mine = by_rank[r.rank];
    for (const StepRecord& s : r.steps) mine[s.step] = s;
    offsets[r.rank] = r.has_header ? r.header.clock_offset_us : 0;
    if (r.has_header && r.header.probe_busbw_gbps > 0 && r.rank == ranks.front().rank) {
      d.probe_busbw_gbps = r.header.probe_busbw_gbps;
      d.probe_bytes = r.header.probe_bytes;
      d.probe_algorithm = r.header.algorithm;
    }
  }

  // Wait for peers: at each step every rank of its world reported (the ranks of the newest
  // membership epoch that recorded the step: a rank lost, a replacement joined, the world is the
  // one of that epoch), the time between a rank's gradients being ready and the last rank's, at
  // most its sync time.
  std::map<int, std::map<int64_t, double>> wait;        // rank -> step -> seconds
  std::map<int64_t, std::map<int, StepRecord>>
      common;                       // the steps every rank of its world reported
  std::map<int64_t, int> epoch_of;  // step -> the newest epoch that recorded it
  for (const auto& [rank, steps] : by_rank) {
    for (const auto& [step, s] : steps) {
      auto [it, fresh] = epoch_of.emplace(step, s.epoch);
      if (!fresh) it->second = std::max(it->second, s.epoch);
    }
  }
  for (const auto& [step, epoch] : epoch_of) {
    std::map<int, StepRecord> there;
    int64_t last_ready = 0;
    int world = 0;
    for (const auto& [rank, steps] : by_rank) {
      auto it = steps.find(step);
      if (it == steps.end() || it->second.epoch != epoch) continue;
      there[rank] = it->second;
      world = it->second.world;
      last_ready = std::max(last_ready, it->second.ready_us + offsets[rank]);
    }
    if (there.size() != static_cast<size_t>(world)) continue;
    ++d.common_steps;
    for (const auto& [rank, s] : there) {
      const double w = static_cast<double>(last_ready - (s.ready_us + offsets[rank])) / 1e6;
      wait[rank][step] = std::clamp(w, 0.0, s.sync_s);
    }
    common[step] = std::move(there);
  }

  std::map<int, BusyTable> busy;  // by membership epoch: stragglers among the same ranks
  double best_busbw_wait = -1;
  for (const auto& [rank, steps] : by_rank) {
    RankBreakdown b{.rank = rank};
    double bytes = 0, coll_s = 0;
    for (const auto& [step, s] : steps) {
      ++b.steps;
      b.data_s += s.data_s;
      b.compute_s += s.compute_s;
      double w = 0;
      if (auto it = wait[rank].find(step); it != wait[rank].end()) w = it->second;
      b.wait_s += w;
      b.comm_s += s.sync_s - w;
      bytes += static_cast<double>(s.sent_bytes);
      coll_s += static_cast<double>(s.collective_us) / 1e6;
      busy[s.epoch][rank][step] = s.busy_s();
    }
    if (b.steps > 0) {
      const auto n = static_cast<double>(b.steps);
      b.data_s /= n;
      b.compute_s /= n;
      b.wait_s /= n;
      b.comm_s /= n;
      b.step_s = b.data_s + b.compute_s + b.wait_s + b.comm_s;
      b.bytes_per_step = static_cast<uint64_t>(bytes / n);
    }
    b.busbw_gbps = coll_s > 0 ? bytes / coll_s / 1e9 : 0;
    // The rank that waited least for its peers measures the transfers best.
    if (b.busbw_gbps > 0 && (best_busbw_wait < 0 || b.wait_s < best_busbw_wait)) {
      best_busbw_wait = b.wait_s;
      d.achieved_busbw_gbps = b.busbw_gbps;
    }
    d.ranks.push_back(b);
  }
  if (!d.ranks.empty()) {
    RankBreakdown& m = d.mean;
    m.rank = -1;
    for (const auto& b : d.ranks) {
      m.steps = std::max(m.steps, b.steps);
      m.data_s += b.data_s;
      m.compute_s += b.compute_s;
      m.wait_s += b.wait_s;
      m.comm_s += b.comm_s;
      m.bytes_per_step += b.bytes_per_step;
    }
    const auto n = static_cast<double>(d.ranks.size());
    m.data_s /= n;
    m.compute_s /= n;
    m.wait_s /= n;
    m.comm_s /= n;
    m.bytes_per_step /= d.ranks.size();
    m.step_s = m.data_s + m.compute_s + m.wait_s + m.comm_s;
    m.busbw_gbps = d.achieved_busbw_gbps;
  }
  for (const auto& [epoch, table] : busy) {
    for (Straggler& st : find_stragglers(table, job.straggler)) d.stragglers.push_back(st);
  }
  if (job.sync_mode == "allreduce" && by_rank.size() > 1) {
    d.local_sgd = estimate_local_sgd(common, d.mean.comm_s, 8);
    // Over the same ranks throughout: the membership epoch with the most common steps.
    std::map<int, std::map<int64_t, std::map<int, StepRecord>>> by_epoch;
    for (const auto& [step, recs] : common) by_epoch[epoch_of.at(step)][step] = recs;
    const std::map<int64_t, std::map<int, StepRecord>>* longest = nullptr;
    for (const auto& [epoch, steps] : by_epoch) {
      if (!longest || steps.size() > longest->size()) longest = &steps;
    }
    if (longest) d.ssp = estimate_ssp(*longest, d.mean.comm_s, 3, SspEstimate{}.fresh_wait);
  }

  // Findings: the numbers, in words.
  const RankBreakdown& m = d.mean;
  if (m.steps > 0) {
    d.findings.push_back(
        strf("a step takes %.1f ms on average: %s computing, %s loading data, %s waiting for other "
             "ranks, %s communicating",
             1e3 * m.step_s, pct(m.share(m.compute_s)).c_str(), pct(m.share(m.data_s)).c_str(),
             pct(m.share(m.wait_s)).c_str(), pct(m.share(m.comm_s)).c_str()));
  }
  if (d.achieved_busbw_gbps > 0) {
    std::string line =
        strf("gradient allreduces reached %.2f GB/s bus bandwidth (%s per step per rank)",
             d.achieved_busbw_gbps, mb(static_cast<double>(m.bytes_per_step)).c_str());
    if (d.probe_busbw_gbps > 0) {
      line += strf("; the transport probe (%s allreduce at start-up) reached %.2f GB/s: %s of it",
                   mb(static_cast<double>(d.probe_bytes)).c_str(), d.probe_busbw_gbps,
                   pct(d.achieved_busbw_gbps / d.probe_busbw_gbps).c_str());
    }
    d.findings.push_back(line);
  }
  for (const auto& s : d.stragglers) d.findings.push_back(s.describe());
  if (!outcome.hang_headline.empty()) {
    d.findings.push_back("hang report: " + outcome.hang_headline);
  }
  if (!outcome.status.empty() && outcome.status != "completed") {
    d.findings.push_back("the run " + outcome.status +
                         (outcome.error.empty() ? "" : ": " + outcome.error));
  }
  d.recommendations = recommendations(d);
  return d;
}

std::vector<std::string> recommendations(const Diagnosis& d) {
  std::vector<std::string> out;
  const RankBreakdown& m = d.mean;
  const JobFacts& job = d.job;
  const bool python = !job.program.empty();
  const std::string threads = python ? std::string("torch.set_num_threads in the script")
                                     : strf("threads_per_worker (now %lld)",
                                            static_cast<long long>(job.threads_per_worker));

  if (!d.outcome.hang_headline.empty()) {
    out.push_back(
        "the run hung: " + d.outcome.hang_headline +
        ". Look at what that rank was doing in its log (cohort logs RUN_DIR --rank R) and at "
        "every rank's last collectives in hang-report.txt");
  } else if (!d.outcome.status.empty() && d.outcome.status == "failed" &&
             !d.outcome.error.empty()) {
    out.push_back("the run failed: " + d.outcome.error +
                  ". The failing rank's log has the details (cohort logs RUN_DIR --rank R)");
  }
  if (m.steps == 0 || m.step_s <= 0) {
    if (out.empty()) out.push_back("no steps were recorded: nothing to analyse");
    return out;
  }

  // Stragglers first: their cost shows up as everyone else's wait.
  for (const Straggler& s : d.stragglers) {
    double others_wait = 0;
    int n = 0;
    for (const auto& b : d.ranks) {
      if (b.rank != s.rank) {
        others_wait += b.share(b.wait_s);
        ++n;
      }
    }
    out.push_back(
        strf("rank %d is a straggler: it is busy %.1f ms per step against %.1f ms on the "
             "others (%.1fx, steps %lld-%lld), and the other ranks spend %s of each step "
             "waiting for it. Look for what else runs on its machine or core, a slower "
             "machine, or a larger share of data; %s sets how many cores each worker uses",
             s.rank, 1e3 * s.busy_s, 1e3 * s.others_median_s, s.ratio(),
             static_cast<long long>(s.first_step), static_cast<long long>(s.last_step),
             pct(n > 0 ? others_wait / n : 0).c_str(), threads.c_str()));
  }
  const double wait = m.share(m.wait_s), comm = m.share(m.comm_s), data = m.share(m.data_s),
               compute = m.share(m.compute_s);
  if (d.stragglers.empty() && wait >= 0.2) {
    out.push_back(
        strf("ranks spend %s of each step waiting for one another, but no rank is "
             "consistently slower (debug.straggler_margin %.2f over %lld steps): the "
             "imbalance moves between ranks, as when the machine is oversubscribed. "
             "Fewer workers or a smaller %s may help",
             pct(wait).c_str(), job.straggler.margin, static_cast<long long>(job.straggler.window),
             threads.c_str()));
  }
  if (comm >= 0.3) {
    std::string advice = strf(
        "communication-bound: %s of each step waits on the gradient allreduce "
        "after backward",
        pct(comm).c_str());
    std::vector<std::string> tries;
    const double of_probe =
        d.probe_busbw_gbps > 0 ? d.achieved_busbw_gbps / d.probe_busbw_gbps : 0.0;
    if (python) {
      tries.push_back(
          "one of Cohort's codecs as DDP's communication hook, unless the script compresses "
          "already: ddp.register_comm_hook(cohort.hooks.State(), cohort.hooks.int8) (about 4x "
          "fewer bytes) or cohort.hooks.fp16 (2x)");
    } else if (job.compression == "none") {
      tries.push_back("comm.compression: int8 (about 4x fewer bytes) or fp16 (2x)");
    } else if (job.compression == "fp16" || job.compression == "bf16") {
      tries.push_back("comm.compression: int8 or powersgd (more compression than " +
                      job.compression + ")");
    }
    if (d.probe_busbw_gbps > 0 && of_probe < 0.5) {
      tries.push_back(
          strf("a larger comm.bucket_mb (now %g): the allreduces reach %s of the "
               "transport's measured bandwidth, so they pay latency more than bytes",
               job.bucket_mb, pct(of_probe).c_str()));
    } else if (d.probe_busbw_gbps > 0) {
      tries.push_back(
          strf("the allreduces already reach %s of the transport's measured bandwidth: "
               "fewer bytes (compression) or a larger train.batch_size (now %lld) per "
               "step is what helps",
               pct(of_probe).c_str(), static_cast<long long>(job.batch_size)));
    }
    if (!tries.empty()) {
      advice += "; try ";
      for (size_t i = 0; i < tries.size(); ++i) advice += (i ? ", or " : "") + tries[i];
    }
    out.push_back(advice);
  }
  if (data >= 0.2) {
    out.push_back(
        strf("data-loading-bound: %s of each step assembles the batch on the training "
             "thread; a larger train.batch_size (now %lld) spreads that cost over more "
             "samples",
             pct(data).c_str(), static_cast<long long>(job.batch_size)));
  }
  if (compute >= 0.7 && out.empty()) {
    out.push_back(
        strf("compute-bound: %s of each step computes and little waits on the network, "
             "so the job scales well; more workers will add throughput",
             pct(compute).c_str()));
  }
  if (const auto& e = d.local_sgd; e && e->speedup() >= 1.25 && (wait + comm) >= 0.2) {
    const std::string how =
        python ? strf(
                     "with local SGD every %lld steps (torch's PostLocalSGDOptimizer with a "
                     "PeriodicModelAverager of that period)",
                     static_cast<long long>(e->period))
               : strf("with sync.mode: local_sgd and sync.period: %lld",
                      static_cast<long long>(e->period));
    out.push_back(strf(
        "synchronising every step costs this run %s of each step (waiting %s, communicating %s): "
        "%s, its measured step times give "
        "%.1f ms per step instead of %.1f ms (%.2fx), as every rank then waits for the others "
        "and averages the model once per period; %s. Time to accuracy also depends on how local "
        "SGD converges for this model, which the estimate does not know: %s",
        pct(wait + comm).c_str(), pct(wait).c_str(), pct(comm).c_str(), how.c_str(),
        1e3 * e->local_sgd_s, 1e3 * e->measured_s, e->speedup(),
        d.stragglers.empty() ? "the slowest rank of each period sets its pace"
                             : "a persistent straggler still sets the pace of every period, "
                               "so only the communication is saved",
        python ? "evaluate both as they train" : "compare with train.eval_every_steps"));
  }
  // Cohort's parameter servers serve its own training loop, not a Python script's.
  if (const auto& e = d.ssp; e && !python && e->speedup() >= 1.25 && wait >= 0.2) {
    out.push_back(strf(
        "ranks wait %s of each step for one another: with sync.mode: ssp, sync.staleness: %lld "
        "(sync.fresh_wait: %g) and parameter_servers, its measured step times give %.1f ms per "
        "step instead of %.1f ms (%.2fx), as a rank that is slow for a few steps holds the "
        "others back only once it is %lld steps behind, and the others wait for its gradient "
        "for at most %g of their step; %s. Stale gradients may need more steps to the same "
        "accuracy",
        pct(wait).c_str(), static_cast<long long>(e->staleness), e->fresh_wait, 1e3 * e->ssp_s,
        1e3 * e->measured_s, e->speedup(), static_cast<long long>(e->staleness), e->fresh_wait,
        d.stragglers.empty() ? "slow spells that come and go are what it absorbs"
                             : "a persistent straggler still has all of its own steps to train"));
  }
  if (out.empty()) {
    out.push_back(strf("no single bottleneck: compute %s, data %s, waiting %s, communication %s",
                       pct(compute).c_str(), pct(data).c_str(), pct(wait).c_str(),
                       pct(comm).c_str()));
  }
  return out;
}

RunOutcome read_hang_report(const std::string& text, RunOutcome outcome) {
  std::istringstream in(text);
  std::string line;
  std::getline(in, outcome.hang_cause);
  // cause, blank, "hang report", blank, the headline paragraph.
  bool in_report = false, in_headline = false;
  while (std::getline(in, line)) {
    if (!in_report) {
      in_report = line == "hang report";
      continue;
    }
    if (line.empty()) {
      if (in_headline) break;
      continue;
    }
    in_headline = true;
    outcome.hang_headline += (outcome.hang_headline.empty() ? "" : " ") + line;
  }
  return outcome;
}

json Diagnosis::to_json() const {
  json ranks_json = json::array();
  for (const auto& b : ranks) ranks_json.push_back(breakdown_json(b));
  json stragglers_json = json::array();
  for (const auto& s : stragglers) stragglers_json.push_back(s.to_json());
  json j{
      {"job", job.name},
      {"workers", job.workers},
      {"ranks", ranks_json},
      {"mean", breakdown_json(mean)},
      {"common_steps", common_steps},
      {"achieved_busbw_gbps", achieved_busbw_gbps},
      {"probe",
       {{"bytes", probe_bytes}, {"busbw_gbps", probe_busbw_gbps}, {"algorithm", probe_algorithm}}},
      {"stragglers", stragglers_json},
      {"ssp_estimate", ssp ? json{{"staleness", ssp->staleness},
                                  {"fresh_wait", ssp->fresh_wait},
                                  {"steps", ssp->steps},
                                  {"measured_step_s", ssp->measured_s},
                                  {"ssp_step_s", ssp->ssp_s},
                                  {"speedup", ssp->speedup()}}
                           : json(nullptr)},
      {"local_sgd_estimate", local_sgd ? json{{"period", local_sgd->period},
                                              {"steps", local_sgd->steps},
                                              {"measured_step_s", local_sgd->measured_s},
                                              {"local_sgd_step_s", local_sgd->local_sgd_s},
                                              {"speedup", local_sgd->speedup()}}
                                       : json()},
      {"straggler_margin", job.straggler.margin},
      {"straggler_window", job.straggler.window},
      {"findings", findings},
      {"recommendations", recommendations}};
  if (!outcome.status.empty()) j["status"] = outcome.status;
  if (!outcome.error.empty()) j["error"] = outcome.error;
  if (!outcome.hang_headline.empty()) {
    j["hang"] = {{"cause", outcome.hang_cause}, {"headline", outcome.hang_headline}};
  }
  return j;
}

std::string Diagnosis::text() const {
  std::string t = "diagnosis of '" + job.name + "'";
  if (!outcome.status.empty()) t += " (" + outcome.status + ")";
  t += strf(": %zu ranks\n\n", ranks.size());
  t += "per rank, mean per step    step      compute        data        wait        comm   "
       "busbw\n";
  auto row = [&](const RankBreakdown& b, const std::string& who) {
    auto cell = [&](double s) { return strf("%6.1fms %3.0f%%", 1e3 * s, 100 * b.share(s)); };
    t += strf("  %-22s %7.1fms  %s  %s  %s  %s  %s\n", who.c_str(), 1e3 * b.step_s,
              cell(b.compute_s).c_str(), cell(b.data_s).c_str(), cell(b.wait_s).c_str(),
              cell(b.comm_s).c_str(),
              b.busbw_gbps > 0 ? strf("%.2f GB/s", b.busbw_gbps).c_str() : "-");
  };
  for (const auto& b : ranks)
    row(b, strf("rank %d (%lld steps)", b.rank, static_cast<long long>(b.steps)));
  if (ranks.size() > 1) row(mean, "mean");
  t += strf("  (wait/comm split over %lld steps that every rank reported)\n",
            static_cast<long long>(common_steps));
  t += "\nfindings\n";
  for (const auto& f : findings) t += "  - " + f + "\n";
  if (!job.program.empty()) {
    t += "  - a Python program (" + job.program +
         "): a step is the span between two of its cohort.report() calls, blocked on the "
         "group's collectives or computing (its data loading included)\n";
  } else if (probe_busbw_gbps <= 0) {
    t += "  - no transport probe was recorded\n";
  }
  t += "\nrecommendations\n";
  for (const auto& r : recommendations) t += "  - " + r + "\n";
  return t;
}

}  // namespace cohort::trace
