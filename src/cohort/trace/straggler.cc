#include "cohort/trace/straggler.h"

#include <algorithm>
#include <cstdio>

namespace cohort::trace {

using nlohmann::json;

namespace {

// The median of sorted `v` without one occurrence of `x` (which it holds).
double median_without(const std::vector<double>& v, double x) {
  const size_t skip = static_cast<size_t>(std::lower_bound(v.begin(), v.end(), x) - v.begin());
  auto at = [&](size_t k) { return k < skip ? v[k] : v[k + 1]; };
  const size_t m = v.size() - 1;
  return m % 2 ? at(m / 2) : (at(m / 2 - 1) + at(m / 2)) / 2;
}

}  // namespace

std::string Straggler::describe() const {
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "rank %d is a straggler: busy %.3f s per step against a median of %.3f s on the "
                "other ranks (%.1fx) over steps %lld-%lld",
                rank, busy_s, others_median_s, ratio(), static_cast<long long>(first_step),
                static_cast<long long>(last_step));
  return buf;
}

json Straggler::to_json() const {
  return {{"rank", rank},     {"first_step", first_step},           {"last_step", last_step},
          {"busy_s", busy_s}, {"others_median_s", others_median_s}, {"ratio", ratio()}};
}

std::vector<Straggler> find_stragglers(const BusyTable& busy, const StragglerOptions& options) {
  std::vector<Straggler> out;
  if (busy.size() < 2 || options.window < 1) return out;
  // Steps every rank reported, in order.
  std::vector<int64_t> steps;
  for (const auto& entry : busy.begin()->second) {
    const int64_t step = entry.first;
    bool everywhere = std::all_of(busy.begin(), busy.end(),
                                  [&](const auto& r) { return r.second.count(step) > 0; });
    if (everywhere) steps.push_back(step);
  }
  // Each step's busy times, sorted: the others' median is then one lookup per rank.
  std::vector<std::vector<double>> sorted(steps.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    for (const auto& [r, b] : busy) sorted[i].push_back(b.at(steps[i]));
    std::sort(sorted[i].begin(), sorted[i].end());
  }
  for (const auto& [rank, mine] : busy) {
    Straggler best{.rank = rank};
    int64_t best_len = 0;
    int64_t run = 0;
    double run_busy = 0, run_median = 0;
    int64_t run_first = 0, prev_step = 0;
    for (size_t i = 0; i < steps.size(); ++i) {
      const int64_t step = steps[i];
      const double b = mine.at(step), m = median_without(sorted[i], b);
      const bool slow = b > m * (1 + options.margin) && b - m > kMinExcessSeconds;
      // A gap in the common steps (a step some rank did not report) breaks the run.
      if (!slow || (run > 0 && step != prev_step + 1)) {
        run = 0;
        run_busy = run_median = 0;
      }
      if (slow) {
        if (run == 0) run_first = step;
        ++run;
        run_busy += b;
        run_median += m;
        if (run >= options.window && run > best_len) {
          best_len = run;
          best.first_step = run_first;
          best.last_step = step;
          best.busy_s = run_busy / static_cast<double>(run);
          best.others_median_s = run_median / static_cast<double>(run);
        }
      }
      prev_step = step;
    }
    if (best_len > 0) out.push_back(best);
  }
  return out;
}

void StragglerWatch::observe(int rank, int64_t first_step, const std::vector<double>& busy) {
  auto& mine = busy_[rank];
  for (size_t i = 0; i < busy.size(); ++i) mine[first_step + static_cast<int64_t>(i)] = busy[i];
  // Enough history for a window that straddles reports, and not more.
  const auto keep = static_cast<size_t>(std::max<int64_t>(4 * options_.window, 1024));
  while (mine.size() > keep) mine.erase(mine.begin());
}

void StragglerWatch::forget(int rank) {
  busy_.erase(rank);
}

std::vector<Straggler> StragglerWatch::poll() {
  std::vector<Straggler> fresh;
  for (const Straggler& s : find_stragglers(busy_, options_)) {
    if (reported_.insert(s.rank).second) fresh.push_back(s);
  }
  return fresh;
}

}  // namespace cohort::trace
