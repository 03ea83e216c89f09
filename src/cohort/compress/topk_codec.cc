// Top-k sparsification: each rank sends, of every tensor in the bucket, the ceil(ratio * numel)
// values of largest magnitude (per tensor, so that a layer whose gradients are small is not
// starved by one whose gradients are large) with their indices (pairs of 32-bit words: index, f32
// bits), gathered from every rank by a variable-sized allgather; every rank sums the sparse
// contributions in rank order into a dense result and divides by the number of ranks, so all ranks
// get the same bits. The residual is the input with the sent values zeroed. Round trip: kept values
// exact, every other one dropped, so the error of each value is at most the k-th largest magnitude.
// The first warmup_steps exchanges are plain allreduces (no residual): early in training the
// gradients change fast and error feedback holds most coordinates back for many steps, which is
// where top-k loses most of its accuracy (Deep Gradient Compression, Lin et al. 2018, warms up
// too, with a density that decreases over the first epochs).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "cohort/base/error.h"
#include "cohort/compress/codecs.h"

namespace cohort::compress {
namespace {

class TopKCodec final : public Codec {
 public:
  TopKCodec(size_t count, double ratio, int64_t warmup, bool error_feedback,
            std::vector<TensorShape> shapes)
      : Codec(count), warmup_(warmup) {
    if (!(ratio > 0 && ratio <= 1)) {
      throw ConfigError("topk: ratio must be in (0, 1], got " + std::to_string(ratio));
    }
    if (count > UINT32_MAX) throw ConfigError("topk: a bucket holds at most 2^32 - 1 values");
    if (shapes.empty()) shapes.push_back({0, 1, count});
    size_t covered = 0;
    for (const auto& s : shapes) {
      const size_t len = s.rows * s.cols;
      if (s.offset + len > count) throw Error("topk: a tensor lies outside its bucket");
      covered += len;
      if (len == 0) continue;
      const size_t k =
          std::min(len, std::max<size_t>(1, static_cast<size_t>(std::ceil(ratio * len))));
      tensors_.push_back({s.offset, len, k});
      k_ += k;
    }
    if (covered != count) throw Error("topk: the tensor shapes do not cover the bucket");
    if (error_feedback) residual_.assign(count, 0.0f);
  }
  Method method() const override { return Method::TopK; }
  size_t k() const { return k_; }

  void round_trip(const float* x, float* out) override {
    select(x);
    std::fill(out, out + count_, 0.0f);
    for (size_t j = 0; j < k_; ++j) out[order_[j]] = x[order_[j]];
  }

  void start(float* grad, comm::Communicator& comm, const ExchangeOptions& opts) override {
    if (warming_up(warmup_)) {
      plain_ = true;
      work_ = comm.allreduce(
          Buffer{DType::F32, grad, count_},
          {.op = comm::ReduceOp::Avg, .algorithm = opts.algorithm, .timeout = opts.timeout});
      return;
    }
    plain_ = false;
    add_residual(residual_, grad);
    select(grad);
    packed_.resize(2 * k_);
    for (size_t j = 0; j < k_; ++j) {
      const uint32_t i = order_[j];
      packed_[2 * j] = i;
      std::memcpy(&packed_[2 * j + 1], &grad[i], 4);
    }
    if (!residual_.empty()) {
      std::copy(grad, grad + count_, residual_.begin());
      for (size_t j = 0; j < k_; ++j) residual_[order_[j]] = 0.0f;
    }
    grad_ = grad;
    world_ = comm.size();
    work_ = comm.allgatherv(Buffer{DType::I32, packed_.data(), packed_.size()}, &gathered_,
                            {.timeout = opts.timeout});
  }

  void finish() override {
    auto w = std::move(work_);
    if (!w) return;
    w->wait();
    if (plain_) return;
    std::fill(grad_, grad_ + count_, 0.0f);
    for (int r = 0; r < world_; ++r) {
      const size_t words = gathered_.counts[static_cast<size_t>(r)];
      if (words % 2 != 0) {
        throw ProtocolError("topk: rank " + std::to_string(r) + " sent an odd number of words (" +
                            std::to_string(words) + ")");
      }
      const auto* p = reinterpret_cast<const uint32_t*>(gathered_.block(r));
      for (size_t j = 0; j < words / 2; ++j) {
        const uint32_t i = p[2 * j];
        if (i >= count_) {
          throw ProtocolError("topk: rank " + std::to_string(r) + " sent index " +
                              std::to_string(i) + " for a bucket of " + std::to_string(count_));
        }
        float v;
        std::memcpy(&v, &p[2 * j + 1], 4);
        grad_[i] += v;
      }
    }
    const float n = static_cast<float>(world_);
    for (size_t i = 0; i < count_; ++i) grad_[i] /= n;
  }

 private:
  // order_[0, k) = for each tensor, the indices of its largest |x|, ascending.
  void select(const float* x) {
    order_.resize(count_);
    std::iota(order_.begin(), order_.end(), 0u);
    // NaN ranks above everything (it must reach the others, not hide in a residual).
    auto mag = [x](uint32_t i) {
      return std::isnan(x[i]) ? std::numeric_limits<float>::infinity() : std::fabs(x[i]);
    };
    auto larger = [&mag](uint32_t a, uint32_t b) {
      const float fa = mag(a), fb = mag(b);
      return fa > fb || (fa == fb && a < b);
    };
    size_t kept = 0;
    for (const auto& t : tensors_) {
      auto first = order_.begin() + static_cast<std::ptrdiff_t>(t.offset);
      auto last = first + static_cast<std::ptrdiff_t>(t.len);
      auto out = order_.begin() + static_cast<std::ptrdiff_t>(kept);
      if (t.k < t.len)
        std::nth_element(first, first + static_cast<std::ptrdiff_t>(t.k), last, larger);
      std::sort(first, first + static_cast<std::ptrdiff_t>(t.k));
      // Tensors are in offset order, so the kept indices stay ascending as they move down.
      std::move(first, first + static_cast<std::ptrdiff_t>(t.k), out);
      kept += t.k;
    }
  }

  struct Tensor {
    size_t offset, len, k;
  };
  std::vector<Tensor> tensors_;
  size_t k_ = 0;
  std::vector<uint32_t> order_;
  std::vector<uint32_t> packed_;
  comm::GatheredBlocks gathered_;
  float* grad_ = nullptr;
  int world_ = 1;
  int64_t warmup_ = 0;
  bool plain_ = false;
  std::shared_ptr<comm::Work> work_;
};

}  // namespace

std::unique_ptr<Codec> make_topk_codec(const CompressionOptions& o, size_t count,
                                       std::vector<TensorShape> shapes) {
  return std::make_unique<TopKCodec>(count, o.topk_ratio, o.topk_warmup_steps, o.error_feedback,
                                     std::move(shapes));
}

}  // namespace cohort::compress
