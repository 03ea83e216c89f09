#include "cohort/sim/calibrate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <random>

#include "cohort/base/error.h"
#include "cohort/comm/reduce.h"
#include "cohort/compress/codec.h"
#include "cohort/compress/formats.h"
#include "cohort/sim/step.h"

namespace cohort::sim {
namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

template <typename F>
double seconds_of(F&& f) {
  const auto t0 = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The median over `reps` runs of f, after one to warm up.
template <typename F>
double median_seconds(int reps, F&& f) {
  f();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) t.push_back(seconds_of(f));
  return median(t);
}

// One allreduce of `bytes` among `ranks` ranks of one host, as the simulator runs it (one bucket,
// ready at once: the step's exposed communication is the allreduce), and the value of one of
// the transport's figures that makes it take a measured time.
class MeasuredAllreduce {
 public:
  MeasuredAllreduce(const Profile& profile, comm::Transport transport, comm::Algorithm algorithm,
                    size_t bytes, int ranks)
      : p_(profile),
        transport_(transport),
        layout_{.workers = ranks, .ranks_per_host = ranks},
        choice_{.algorithm = algorithm, .bucket_mb = 1e6, .transport = transport} {
    p_.compute = Compute{};
    p_.compute.backward_s = 1e-9;
    p_.compute.gradients = {Gradient{.name = "calibration", .bytes = bytes / 4 * 4, .rows = 1,
                                     .cols = bytes / 4, .ready_s = 0}};
    if (transport == comm::Transport::Shm && !p_.shm) p_.shm = p_.tcp;
    if (!(p_.network.bytes_per_s > 0)) p_.network = {.latency_s = 0, .bytes_per_s = 1e9};  // unused: one host
  }
  LinkCost& link() { return transport_ == comm::Transport::Shm ? *p_.shm : p_.tcp; }

  // The x in [lo, hi] that `field` of the link must hold for the allreduce to take `seconds`
  // (the time rising or falling with it), by bisection, halving the ratio of the ends where
  // `geometric`; lo or hi when the measurement lies beyond what they give.
  double fit(double LinkCost::*field, double lo, double hi, double seconds, bool geometric) {
    auto at = [&](double x) {
      link().*field = x;
      return simulate(p_, layout_, choice_).exposed_comm_s;
    };
    const double at_lo = at(lo), at_hi = at(hi);
    const bool rising = at_lo < at_hi;
    if (rising ? seconds <= at_lo : seconds >= at_lo) return lo;
    if (rising ? seconds > at_hi : seconds < at_hi) return hi;
    auto middle = [&] { return geometric ? std::sqrt(lo * hi) : (lo + hi) / 2; };
    for (int i = 0; i < 60; ++i) {
      const double mid = middle();
      ((at(mid) < seconds) == rising ? lo : hi) = mid;
    }
    return middle();
  }

 private:
  Profile p_;
  comm::Transport transport_;
  Layout layout_;
  Choice choice_;
};

}  // namespace

double fit_bandwidth(const Profile& profile, comm::Transport transport, comm::Algorithm algorithm,
                     size_t bytes, double seconds) {
  if (bytes < (size_t{1} << 20) || !(seconds > 0)) {
    throw Error("calibration: a bandwidth is fitted on a measured allreduce of 1 MiB or more");
  }
  // Bytes per second; faster than any rate explains: the kernels' cost rules (the highest).
  return MeasuredAllreduce(profile, transport, algorithm, bytes, 2)
      .fit(&LinkCost::bytes_per_s, 1e6, 1e13, seconds, /*geometric=*/true);
}

double fit_oversubscribed_latency(const Profile& profile, comm::Transport transport, int ranks,
                                  double seconds) {
  if (ranks <= profile.cores) {
    throw Error("calibration: an oversubscribed latency is fitted with more ranks than cores");
  }
  MeasuredAllreduce crowded(profile, transport, comm::Algorithm::RecursiveDoubling, 8, ranks);
  // No slower than with a core for every rank: no wait at all (the lowest).
  return crowded.fit(&LinkCost::oversubscribed_latency_s, crowded.link().latency_s, 10, seconds,
                     /*geometric=*/false);
}

double fit_oversubscribed_exponent(const Profile& profile, comm::Transport transport, int ranks,
                                   double seconds) {
  if (ranks <= 2 * profile.cores) {
    throw Error("calibration: the oversubscribed exponent is fitted with more than twice as many ranks as cores");
  }
  MeasuredAllreduce crowded(profile, transport, comm::Algorithm::RecursiveDoubling, 8, ranks);
  if (!(crowded.link().oversubscribed_latency_s > crowded.link().latency_s)) return 1;  // no wait to grow
  return crowded.fit(&LinkCost::oversubscribed_exponent, 0, 4, seconds, /*geometric=*/false);
}

double measure_reduce() {
  const size_t n = size_t{4} << 20;  // 16 MiB of f32 per operand
  std::vector<float> a(n, 1.0f), b(n, 2.0f);
  const double t = median_seconds(9, [&] {
    comm::reduce(DType::F32, comm::ReduceOp::Sum, a.data(), a.data(), b.data(), n);
  });
  return static_cast<double>(n * sizeof(float)) / t;
}

std::map<std::string, CodecCost, std::less<>> measure_codecs(
    double topk_ratio, int powersgd_rank, const std::vector<Gradient>& gradients) {
  const size_t n = size_t{4} << 20;
  const double bytes = static_cast<double>(n * sizeof(float));
  std::vector<float> x(n), y(n);
  std::mt19937 gen(7);
  std::normal_distribution<float> dist(0, 1);
  for (float& v : x) v = dist(gen);
  std::map<std::string, CodecCost, std::less<>> out;
  compress::Fp16Encoding fp16;
  compress::Bf16Encoding bf16;
  compress::Int8Encoding int8(256, true, 1);
  for (comm::Encoding* e : std::vector<comm::Encoding*>{&fp16, &bf16, &int8}) {
    std::vector<uint8_t> wire(e->encoded_bytes(n));
    const double enc = median_seconds(5, [&] { e->encode(x.data(), n, wire.data()); });
    const double dec = median_seconds(5, [&] { e->decode_add(wire.data(), n, y.data()); });
    out[std::string(e->name())] = {.encode_bytes_per_s = bytes / enc, .decode_bytes_per_s = bytes / dec};
  }
  // Top-k and PowerSGD on the job's gradients as one bucket, as DDP hands them over (each tensor
  // its first dimension by the rest), else a 2048 x 2048 matrix: a round trip is their work on one
  // rank's contribution. PowerSGD's three products (M Q, M^T P, P Q^T) cost alike: two thirds are
  // its encoding, one its decoding. Top-k's decoding is a sum of the gathered entries, costed as a
  // reduction.
  compress::CompressionOptions o;
  o.topk_ratio = topk_ratio;
  o.powersgd_rank = powersgd_rank;
  o.topk_warmup_steps = 0;
  o.powersgd_warmup_steps = 0;
  o.min_bytes = 0;
  std::vector<compress::TensorShape> shape = {{.offset = 0, .rows = 2048, .cols = n / 2048}};
  size_t count = n;
  if (!gradients.empty()) {
    shape.clear();
    count = 0;
    for (const Gradient& g : gradients) {
      shape.push_back({.offset = count, .rows = g.rows, .cols = g.cols});
      count += g.bytes / 4;
    }
    x.resize(std::max(count, x.size()));
    y.resize(std::max(count, y.size()));
    for (float& v : x) v = dist(gen);
  }
  const double job_bytes = static_cast<double>(count * sizeof(float));
  o.method = compress::Method::TopK;
  auto topk = compress::make_codec(o, count, shape);
  const double t_topk = median_seconds(7, [&] { topk->round_trip(x.data(), y.data()); });
  out["topk"] = {.encode_bytes_per_s = job_bytes / t_topk, .decode_bytes_per_s = measure_reduce()};
  o.method = compress::Method::PowerSgd;
  auto psgd = compress::make_codec(o, count, shape);
  const double t_psgd = median_seconds(7, [&] { psgd->round_trip(x.data(), y.data()); });
  out["powersgd"] = {.encode_bytes_per_s = job_bytes / (t_psgd * 2 / 3),
                     .decode_bytes_per_s = job_bytes / (t_psgd / 3)};
  return out;
}

Compute compute_from_trace(const nlohmann::json& trace, std::vector<Gradient> gradients,
                           double bucket_mb, int64_t skip) {
  if (!trace.is_object() || !trace.contains("traceEvents") || !trace["traceEvents"].is_array()) {
    throw Error("calibration: the trace has no traceEvents");
  }
  struct StepSpans {
    double data = -1, forward = -1, backward = -1, optimizer = -1;
    double backward_start = 0;
  };
  std::map<int64_t, StepSpans> steps;
  std::map<int64_t, double> data_start;
  struct Instant {
    double ts;
    size_t bucket;
    uint64_t bytes;
  };
  std::vector<Instant> instants;
  for (const auto& e : trace["traceEvents"]) {
    const std::string ph = e.value("ph", "");
    const std::string name = e.value("name", "");
    if (ph == "X" && e.contains("args") && e["args"].contains("step")) {
      const int64_t step = e["args"]["step"].get<int64_t>();
      const double dur = e.value("dur", 0.0) * 1e-6;
      StepSpans& s = steps[step];
      if (name == "data") {
        s.data = dur;
        data_start[step] = e.value("ts", 0.0) * 1e-6;
      }
      if (name == "forward") s.forward = dur;
      if (name == "optimizer") s.optimizer = dur;
      if (name == "backward") {
        s.backward = dur;
        s.backward_start = e.value("ts", 0.0) * 1e-6;
      }
    } else if (ph == "i" && name.rfind("bucket ", 0) == 0) {
      instants.push_back(Instant{.ts = e.value("ts", 0.0) * 1e-6,
                                 .bucket = static_cast<size_t>(std::stoul(name.substr(7))),
                                 .bytes = e.contains("args") ? e["args"].value("bytes", uint64_t{0}) : 0});
    }
  }
  Compute c;
  std::vector<double> data, forward, backward, optimizer;
  std::vector<std::pair<double, double>> windows;  // backward spans [start, end] of counted steps
  for (const auto& [step, s] : steps) {
    if (step <= skip || s.forward < 0 || s.backward < 0 || s.optimizer < 0) continue;
    data.push_back(std::max(0.0, s.data));
    forward.push_back(s.forward);
    backward.push_back(s.backward);
    optimizer.push_back(s.optimizer);
    windows.emplace_back(s.backward_start, s.backward_start + s.backward);
  }
  if (backward.size() < 3) {
    throw Error("calibration: the trace holds " + std::to_string(backward.size()) +
                " complete steps after the first " + std::to_string(skip) + "; it needs 3 or more");
  }
  c.data_s = median(data);
  c.forward_s = median(forward);
  c.backward_s = median(backward);
  c.optimizer_s = median(optimizer);
  // The phases' medians need not add up to the median step: what the loop does between the
  // optimizer and the next batch (reporting, the step log) counts with the optimizer.
  std::vector<double> periods;
  for (auto it = data_start.begin(); it != data_start.end(); ++it) {
    auto next = std::next(it);
    if (next != data_start.end() && it->first > skip && next->first == it->first + 1) {
      periods.push_back(next->second - it->second);
    }
  }
  if (periods.size() >= 3) {
    c.optimizer_s = std::max(c.optimizer_s, median(periods) - c.data_s - c.forward_s - c.backward_s);
  }

  Compute shapes;
  shapes.gradients = gradients;
  const auto buckets = buckets_of(shapes, bucket_mb);
  std::vector<std::vector<double>> at(buckets.size());
  for (const Instant& i : instants) {
    if (i.bucket >= buckets.size()) {
      throw Error("calibration: the trace has bucket " + std::to_string(i.bucket) + " but the model has " +
                  std::to_string(buckets.size()) + " buckets of " + std::to_string(bucket_mb) + " MiB");
    }
    for (const auto& [start, end] : windows) {
      if (i.ts >= start && i.ts <= end) at[i.bucket].push_back((i.ts - start) / (end - start));
    }
  }
  // Each bucket's readiness as a fraction of its step's backward (steps differ a little in
  // length), then in seconds of the median backward; gradients that shared a bucket are spread
  // over the time since the bucket before it by their bytes.
  double before = 0;
  for (size_t b = 0; b < buckets.size(); ++b) {
    if (at[b].empty()) {
      throw Error("calibration: the trace has no time for bucket " + std::to_string(b));
    }
    const double ready = std::clamp(median(at[b]) * c.backward_s, before, c.backward_s);
    double total = 0, so_far = 0;
    for (size_t g : buckets[b]) total += static_cast<double>(gradients[g].bytes);
    for (size_t g : buckets[b]) {
      so_far += static_cast<double>(gradients[g].bytes);
      gradients[g].ready_s = before + (ready - before) * so_far / total;
    }
    before = ready;
  }
  c.gradients = std::move(gradients);
  return c;
}

double phase_median_s(const nlohmann::json& trace, const std::string& phase, int64_t skip) {
  std::vector<double> d;
  if (trace.contains("traceEvents") && trace["traceEvents"].is_array()) {
    for (const auto& e : trace["traceEvents"]) {
      if (e.value("ph", "") == "X" && e.value("name", "") == phase && e.contains("args") &&
          e["args"].value("step", int64_t{0}) > skip) {
        d.push_back(e.value("dur", 0.0) * 1e-6);
      }
    }
  }
  if (d.size() < 3) throw Error("calibration: the trace holds too few " + phase + " phases");
  return median(d);
}

}  // namespace cohort::sim
