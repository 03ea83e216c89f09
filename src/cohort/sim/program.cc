#include "cohort/sim/program.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "cohort/base/error.h"
#include "cohort/compress/formats.h"

namespace cohort::sim {
namespace {

// The costs of a plan's local work, from the profile's kernels and the codec's own rates.
WorkCost work_cost(const Profile& p, const std::string& codec) {
  const CodecCost* c = nullptr;
  if (!codec.empty()) {
    auto it = p.codecs.find(codec);
    if (it == p.codecs.end()) {
      throw Error("profile " + p.name + " has no cost for codec " + codec +
                  " (kernels.codecs." + codec + "): calibrate again or add it");
    }
    c = &it->second;
  }
  const double reduce = p.reduce_bytes_per_s;
  return [reduce, c](comm::WorkKind kind, size_t bytes) {
    const double b = static_cast<double>(bytes);
    switch (kind) {
      case comm::WorkKind::Reduce:
      case comm::WorkKind::Divide:
        return b / reduce;
      case comm::WorkKind::Encode:
        return c ? b / c->encode_bytes_per_s : b / reduce;
      case comm::WorkKind::Decode:
        return c ? b / c->decode_bytes_per_s : b / reduce;
    }
    return 0.0;
  };
}

const CodecCost& codec_cost(const Profile& p, const std::string& name) {
  auto it = p.codecs.find(name);
  if (it == p.codecs.end()) {
    throw Error("profile " + p.name + " has no cost for codec " + name + " (kernels.codecs." +
                name + "): calibrate again or add it");
  }
  return it->second;
}

class Builder {
 public:
  Builder(const Profile& p, const Choice& c, const std::vector<int>& host_of)
      : p_(p), c_(c), host_of_(host_of) {}

  // A collective of the step; plans of equal collectives are made once.
  int op(CollectiveSpec spec, const std::string& codec) {
    spec.chunk_bytes = c_.chunk_bytes;
    const size_t bytes = spec.count * dtype_size(spec.dtype);
    spec.shared_memory = shared_memory_within_host(p_, c_);
    spec.cores = p_.cores;
    const comm::Algorithm algo =
        spec.kind == CollectiveSpec::Kind::Allreduce
            ? resolve_algorithm(spec.algorithm, bytes, host_of_, spec.shared_memory, spec.cores)
            : comm::Algorithm::Ring;
    spec.algorithm = algo;
    const auto key = std::make_tuple(static_cast<int>(spec.kind), static_cast<int>(algo),
                                     spec.count, codec);
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      std::vector<RankPlan> plans = plan_collective(spec, host_of_, work_cost(p_, codec));
      if (spec.kind == CollectiveSpec::Kind::EncodedAllreduce && c_.compression.error_feedback) {
        // Error feedback: before its first exchange each rank decodes its whole encoded input
        // again and subtracts it from the input (allreduce_encoded.cc). The plan is made without
        // a residual, whose arithmetic would run for real on every planned rank.
        const double bytes_in = static_cast<double>(spec.count * sizeof(float));
        const double extra = bytes_in / codec_cost(p_, codec).decode_bytes_per_s + bytes_in / p_.reduce_bytes_per_s;
        for (RankPlan& r : plans) {
          if (!r.exchanges.empty()) r.exchanges.front().work_before_s += extra;
        }
      }
      it = cache_.emplace(key, std::make_shared<const std::vector<RankPlan>>(std::move(plans))).first;
    }
    program_.ops.push_back(Collective{.spec = spec, .codec = codec, .algorithm = algo,
                                      .plans = it->second});
    return static_cast<int>(program_.ops.size() - 1);
  }
  void act(Action::Kind kind, double seconds = 0, int op = -1) {
    if ((kind == Action::Kind::Compute || kind == Action::Kind::Codec) && seconds <= 0) return;
    program_.actions.push_back(Action{.kind = kind, .seconds = seconds, .op = op});
  }
  // The codec's work on the communication thread around collective `op`.
  void around(int op, double before_s, double after_s) {
    program_.ops[static_cast<size_t>(op)].before_s = before_s;
    program_.ops[static_cast<size_t>(op)].after_s = after_s;
  }
  StepProgram take() { return std::move(program_); }

 private:
  const Profile& p_;
  const Choice& c_;
  const std::vector<int>& host_of_;
  StepProgram program_;
  std::map<std::tuple<int, int, size_t, std::string>, std::shared_ptr<const std::vector<RankPlan>>>
      cache_;
};

// What a bucket's codec does where (codec.h): on the training thread when the bucket is ready
// (top-k's selection, PowerSGD's P = M Q), its collectives (PowerSGD's two, chained, with the
// work between and after them on the communication thread: Collective::before_s, after_s), and
// on the training thread once they are done (top-k's decoding).
struct BucketExchange {
  double at_ready_s = 0;
  int first = -1;
  int second = -1;
  double decode_s = 0;
};

BucketExchange bucket_exchange(Builder& b, const Profile& p, const Choice& c,
                               const std::vector<Gradient>& grads, int world) {
  uint64_t bytes = 0;
  for (const auto& g : grads) bytes += g.bytes;
  const size_t count = bytes / 4;
  const compress::CompressionOptions& o = c.compression;
  BucketExchange x;
  const bool plain = o.method == compress::Method::None || bytes < o.min_bytes || world == 1;
  if (plain) {
    x.first = b.op({.kind = CollectiveSpec::Kind::Allreduce, .algorithm = c.algorithm, .count = count}, "");
    return x;
  }
  switch (o.method) {
    case compress::Method::Fp16:
    case compress::Method::Bf16:
    case compress::Method::Int8: {
      compress::Fp16Encoding fp16;
      compress::Bf16Encoding bf16;
      compress::Int8Encoding int8(o.int8_chunk, o.int8_stochastic_rounding, 0);
      const comm::Encoding* enc = o.method == compress::Method::Fp16   ? static_cast<const comm::Encoding*>(&fp16)
                                  : o.method == compress::Method::Bf16 ? static_cast<const comm::Encoding*>(&bf16)
                                                                       : &int8;
      x.first = b.op({.kind = CollectiveSpec::Kind::EncodedAllreduce, .count = count, .encoding = enc},
                     std::string(compress::method_name(o.method)));
      return x;
    }
    case compress::Method::TopK: {
      const CodecCost& cost = codec_cost(p, "topk");
      size_t k = 0;
      for (const auto& g : grads) {
        const size_t len = g.bytes / 4;
        k += std::min(len, std::max<size_t>(1, static_cast<size_t>(std::ceil(o.topk_ratio * len))));
      }
      x.at_ready_s = static_cast<double>(bytes) / cost.encode_bytes_per_s;
      // Each entry is an index and a value (two 32-bit words), from every rank.
      x.first = b.op({.kind = CollectiveSpec::Kind::Allgatherv, .count = 2 * k}, "");
      x.decode_s = static_cast<double>(world) * 8.0 * static_cast<double>(k) / cost.decode_bytes_per_s;
      return x;
    }
    case compress::Method::PowerSgd: {
      const CodecCost& cost = codec_cost(p, "powersgd");
      size_t ps = 0, qs = 0, matrix_elems = 0;
      const size_t rank = static_cast<size_t>(o.powersgd_rank);
      for (const auto& g : grads) {
        const size_t r = std::min({rank, static_cast<size_t>(g.rows), static_cast<size_t>(g.cols)});
        if (g.rows > 1 && (g.rows + g.cols) * r * 2 <= g.rows * g.cols) {
          ps += g.rows * r;
          qs += g.cols * r;
          matrix_elems += g.rows * g.cols;
        } else {
          ps += g.rows * g.cols;  // travels uncompressed with P
        }
      }
      const double half = 2.0 * static_cast<double>(matrix_elems) / cost.encode_bytes_per_s;
      const double decode = 4.0 * static_cast<double>(matrix_elems) / cost.decode_bytes_per_s;
      x.at_ready_s = half;
      x.first = b.op({.kind = CollectiveSpec::Kind::Allreduce, .algorithm = c.algorithm, .count = ps}, "");
      if (qs > 0) {
        x.second = b.op({.kind = CollectiveSpec::Kind::Allreduce, .algorithm = c.algorithm, .count = qs}, "");
        b.around(x.second, half, decode);
      } else {
        b.around(x.first, 0, decode);
      }
      return x;
    }
    case compress::Method::None:
      break;
  }
  return x;
}

}  // namespace

std::vector<int> hosts_of(const Layout& layout) {
  if (layout.workers < 1) throw Error("a world needs at least one worker");
  if (layout.ranks_per_host < 1) throw Error("a host needs at least one rank");
  std::vector<int> host_of(static_cast<size_t>(layout.workers));
  for (int r = 0; r < layout.workers; ++r) host_of[static_cast<size_t>(r)] = r / layout.ranks_per_host;
  return host_of;
}

std::vector<std::vector<size_t>> buckets_of(const Compute& compute, double bucket_mb) {
  // DDP's rule (ddp/distributed_data_parallel.cc): a bucket is closed once it holds its capacity;
  // the first one's is 1 MiB.
  const double first = 1 << 20, rest = bucket_mb * (1 << 20);
  std::vector<std::vector<size_t>> buckets;
  std::vector<size_t> current;
  double held = 0;
  for (size_t i = 0; i < compute.gradients.size(); ++i) {
    current.push_back(i);
    held += static_cast<double>(compute.gradients[i].bytes);
    if (held >= (buckets.empty() ? first : rest)) {
      buckets.push_back(std::move(current));
      current.clear();
      held = 0;
    }
  }
  if (!current.empty()) buckets.push_back(std::move(current));
  return buckets;
}

StepProgram make_program(const Profile& profile, const Choice& choice,
                         const std::vector<int>& host_of, StepKind step) {
  const Compute& c = profile.compute;
  const int world = static_cast<int>(host_of.size());
  Builder b(profile, choice, host_of);
  using K = Action::Kind;
  b.act(K::Compute, c.data_s);
  b.act(K::Compute, c.forward_s);
  if (step != StepKind::Allreduce || world == 1) {
    b.act(K::Compute, c.backward_s);
    b.act(K::Compute, c.optimizer_s);
    if (step == StepKind::Averaging && world > 1) {
      const size_t count = c.gradient_bytes() / 4;
      const int avg = b.op({.kind = CollectiveSpec::Kind::Allreduce, .algorithm = choice.algorithm, .count = count}, "");
      b.act(K::Launch, 0, avg);
      b.act(K::Wait, 0, avg);
    }
    StepProgram prog = b.take();
    return prog;
  }
  const auto buckets = buckets_of(c, choice.bucket_mb);
  std::vector<BucketExchange> exchanges;
  double done = 0;  // backward so far
  for (const auto& bucket : buckets) {
    std::vector<Gradient> grads;
    double ready = 0;
    for (size_t i : bucket) {
      grads.push_back(c.gradients[i]);
      ready = std::max(ready, c.gradients[i].ready_s);
    }
    b.act(K::Compute, ready - done);
    done = std::max(done, ready);
    BucketExchange x = bucket_exchange(b, profile, choice, grads, world);
    b.act(K::Codec, x.at_ready_s);
    b.act(K::Launch, 0, x.first);
    if (x.second >= 0) b.act(K::Launch, 0, x.second);
    exchanges.push_back(x);
  }
  b.act(K::Compute, c.backward_s - done);
  for (const BucketExchange& x : exchanges) {
    b.act(K::Wait, 0, x.first);
    if (x.second >= 0) b.act(K::Wait, 0, x.second);
    b.act(K::Codec, x.decode_s);
  }
  b.act(K::Compute, c.optimizer_s);
  StepProgram prog = b.take();
  prog.buckets = buckets.size();
  return prog;
}

}  // namespace cohort::sim
