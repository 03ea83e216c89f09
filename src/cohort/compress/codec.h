// Gradient compression: one Codec per gradient bucket averages that bucket over the ranks of a
// Communicator in a compressed form, keeping what it drops for the next step (error feedback).
//
//   method    on the wire                                    collective
//   none      f32                                            allreduce
//   fp16      IEEE half                                      allreduce_encoded (f32 sums)
//   bf16      bfloat16                                       allreduce_encoded (f32 sums)
//   int8      int8 + an f32 scale per chunk                  allreduce_encoded (f32 sums)
//   topk      the ratio * n largest |values| with indices    allgatherv (sparse), summed densely
//   powersgd  rank-r factors P and Q of each matrix          allreduce of P, then of Q (chained)
//
// Error feedback (on by default for every lossy method): each step compresses gradient +
// residual, and the residual becomes what that compression dropped. Over many steps the sum of
// what the ranks applied equals the sum of their gradients minus the last residual, so nothing is
// lost, only delayed. PowerSGD starts with warmup_steps of plain allreduce (its factors need
// a few steps of warm-started power iteration to be good); top-k can, with topk_warmup_steps
// (0 by default; 50 bring the CNN within its accuracy target after one epoch, BENCHMARKS.md).
//
// The communication core stays free of tensors: a bucket is a span of f32, plus, for PowerSGD,
// the shapes of the tensors in it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cohort/base/bytes.h"
#include "cohort/comm/communicator.h"

namespace cohort::compress {

enum class Method : uint8_t { None, Fp16, Bf16, Int8, TopK, PowerSgd };

std::string_view method_name(Method m);  // "none" | "fp16" | "bf16" | "int8" | "topk" | "powersgd"
// ConfigError naming the choices for anything else.
Method parse_method(std::string_view s);

struct CompressionOptions {
  Method method = Method::None;
  bool error_feedback = true;
  // int8: values per scale, and stochastic (unbiased) rather than nearest rounding.
  size_t int8_chunk = 256;
  bool int8_stochastic_rounding = true;
  // topk: the fraction of each bucket's values sent, in (0, 1].
  double topk_ratio = 0.01;
  int64_t topk_warmup_steps = 0;  // steps of plain allreduce first
  // powersgd: the rank of the approximation and the number of steps of plain allreduce first.
  int powersgd_rank = 4;
  int64_t powersgd_warmup_steps = 10;
  // Buckets smaller than this many bytes of f32 go uncompressed: below it an exchange is
  // latency bound, so compression saves next to no time and still costs its compute and its
  // error (64 KiB is half a millisecond at 1 Gbit/s).
  size_t min_bytes = 64 << 10;
  // Stochastic rounding and PowerSGD's initial factors draw from this seed. Give every rank the
  // same seed: codecs derive a per-rank stream where ranks must differ (rounding noise) and use it
  // as is where they must agree (PowerSGD's shared factors).
  uint64_t seed = 0;
};

// A 2-D view of one tensor in a bucket: `rows` x `cols` f32 values from element `offset`, row
// major. Tensors of one dimension are given with rows == 1.
struct TensorShape {
  size_t offset = 0;
  size_t rows = 0;
  size_t cols = 0;
};

struct ExchangeOptions {
  comm::Algorithm algorithm = comm::Algorithm::Auto;  // of the plain f32 allreduces
  std::chrono::milliseconds timeout{0};
};

class Codec {
 public:
  virtual ~Codec() = default;
  virtual Method method() const = 0;
  size_t count() const { return count_; }

  // What one rank's contribution x becomes on the wire and back, without communication: out =
  // decode(encode(x)). Each method documents the bound on its error. Does not touch the residual.
  virtual void round_trip(const float* x, float* out) = 0;

  // Starts averaging grad (count() f32 values) over comm's ranks. grad must stay valid, and must
  // not be touched, until finish() returns; it then holds the average as every rank decodes it
  // (the same bits on every rank). Calls alternate: start, finish, start, ... Every collective of
  // the exchange is issued by start(), so that codecs of several buckets keep the same order of
  // collectives on every rank whenever their exchanges end; finish() only waits.
  virtual void start(float* grad, comm::Communicator& comm, const ExchangeOptions& opts) = 0;
  virtual void finish() = 0;

  // What the last exchange dropped and the next start() adds back (empty without error feedback).
  const std::vector<float>& residual() const { return residual_; }

  // The training step of the next start() (each start() counts one). A warm-up runs while it is
  // below the method's warm-up steps: a job that resumes at step s, from a checkpoint or after a
  // membership change, gives its new codecs s, so they do not warm up a second time. (Their
  // residuals start empty then: they belonged to steps after the state the job resumed from.)
  void set_step(int64_t step) { step_ = step; }
  int64_t step() const { return step_; }

  // What this codec carries from one exchange to the next - its residual, PowerSGD's
  // warm-started factors Q, int8's rounding stream - as bytes, for a checkpoint: a codec made for
  // the same bucket and rank that loads them exchanges bit for bit as this one would have.
  // load_state throws Error naming what does not fit (another method, another bucket size, a
  // truncated state). A state without a residual loads as an empty one and a residual into a
  // codec without error feedback is dropped, so error_feedback may change across a resume.
  std::string save_state() const;
  void load_state(std::string_view state);

 protected:
  explicit Codec(size_t count) : count_(count) {}
  // What a method keeps beyond the residual (save_state, load_state).
  virtual void save_extra(ByteWriter&) const {}
  virtual void load_extra(ByteReader&) {}
  // Counts this start() as one step; true while the step is below `warmup_steps`.
  bool warming_up(int64_t warmup_steps) { return step_++ < warmup_steps; }
  size_t count_;
  std::vector<float> residual_;

 private:
  int64_t step_ = 0;
};

// The codec for a bucket of `count` f32 values of the given tensors (method none below
// options.min_bytes). Top-k takes its ratio of each tensor; PowerSGD compresses each tensor of
// two or more dimensions on its own. With no shapes the bucket is one tensor (for PowerSGD, one
// near-square matrix). `rank` is the caller's rank (stochastic rounding differs per rank) and
// `bucket` its bucket index (PowerSGD's initial factors differ per bucket).
std::unique_ptr<Codec> make_codec(const CompressionOptions& options, size_t count,
                                  std::vector<TensorShape> shapes = {}, int rank = 0,
                                  size_t bucket = 0);

}  // namespace cohort::compress
