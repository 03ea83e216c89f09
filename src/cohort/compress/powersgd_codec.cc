// PowerSGD (Vogels et al., 2019): each gradient matrix M (rows x cols) is sent as two thin
// factors of rank r, one step of power iteration warm-started from the previous step's Q:
//   P = M Q              allreduce(P) (avg), then orthonormalise P's columns (Gram-Schmidt)
//   Q = M^T P            allreduce(Q) (avg)
//   result = P Q^T       the same on every rank: P and Q are
// Tensors of one dimension, and matrices too small for rank r to save at least half their bytes
// ((rows + cols) * r > rows * cols / 2), travel uncompressed with P. The residual is M minus the
// result. The first warmup_steps exchanges are plain allreduces (no residual), as in PyTorch's
// PowerSGD hook. Round trip: exact (up to f32 rounding) for a matrix of rank <= r; in general
// the rank-r projection of M onto the span of M Q.
// The matrix products are OpenBLAS's cblas_sgemm.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "cohort/base/error.h"
#include "cohort/compress/codecs.h"

namespace cohort::compress {
namespace {

struct Matrix {
  size_t offset, rows, cols;
  size_t p_offset, q_offset;  // where its factors live in p_ and q_
};

class PowerSgdCodec final : public Codec {
 public:
  PowerSgdCodec(size_t count, int rank, int64_t warmup, bool error_feedback,
                std::vector<TensorShape> shapes, uint64_t seed)
      : Codec(count), rank_(static_cast<size_t>(rank)), warmup_(warmup) {
    if (rank < 1 || rank > 1024) {
      throw ConfigError("powersgd: rank must be in [1, 1024], got " + std::to_string(rank));
    }
    if (shapes.empty()) {
      // One near-square matrix over the bucket; a remainder travels uncompressed.
      const size_t cols = std::max<size_t>(1, static_cast<size_t>(std::sqrt(double(count))));
      shapes.push_back({0, count / cols, cols});
      if (count % cols) shapes.push_back({count / cols * cols, 1, count % cols});
    }
    size_t covered = 0;
    for (const auto& s : shapes) {
      if (s.offset + s.rows * s.cols > count)
        throw Error("powersgd: a tensor lies outside its bucket");
      covered += s.rows * s.cols;
      const size_t r = std::min({rank_, s.rows, s.cols});
      if (s.rows > 1 && (s.rows + s.cols) * r * 2 <= s.rows * s.cols) {
        matrices_.push_back({s.offset, s.rows, s.cols, p_size_, q_size_});
        p_size_ += s.rows * r;
        q_size_ += s.cols * r;
      } else {
        dense_.push_back({s.offset, s.rows * s.cols});
      }
    }
    if (covered != count) throw Error("powersgd: the tensor shapes do not cover the bucket");
    dense_offset_ = p_size_;
    for (const auto& d : dense_) p_size_ += d.second;
    p_.assign(p_size_, 0.0f);
    q_.assign(q_size_, 0.0f);
    // Every rank starts from the same Q (same seed), as the method requires.
    seed_ = seed;
    fill_q(0);
    if (error_feedback) residual_.assign(count, 0.0f);
  }

  // The callbacks of an exchange write into this codec: one still in flight ends first (within
  // its collectives' deadlines; its error has no one left to go to).
  ~PowerSgdCodec() override {
    try {
      finish();
    } catch (const std::exception&) {
    }
  }

  Method method() const override { return Method::PowerSgd; }

 protected:
  // Q is warm-started from one step to the next (the same on every rank).
  void save_extra(ByteWriter& w) const override {
    w.put<uint64_t>(q_.size()).put_bytes(q_.data(), q_.size() * sizeof(float));
  }
  void load_extra(ByteReader& r) override {
    const auto n = r.get<uint64_t>();
    if (n != q_.size()) {
      throw Error("codec state: PowerSGD factors of " + std::to_string(n) +
                  " values, this bucket's have " + std::to_string(q_.size()) + " (another rank?)");
    }
    std::memcpy(q_.data(), r.get_bytes(n * sizeof(float)), n * sizeof(float));
  }

 public:
  void round_trip(const float* x, float* out) override {
    std::vector<float> p(p_size_), q(q_);
    project(x, p.data());
    for (const auto& m : matrices_) orthonormalise(p.data() + m.p_offset, m.rows, r_of(m));
    back_project(x, p.data(), q.data());
    reconstruct(p.data(), q.data(), out);
    for (const auto& [off, len] : dense_) std::copy(x + off, x + off + len, out + off);
  }

  // Both factors' allreduces are issued here, P's then Q's, each with a callback that runs on the
  // thread that completes it before the next collective starts (Work::then): P's orthonormalises
  // P and computes Q = M^T P for Q's allreduce, Q's decodes. So the whole exchange goes on while
  // the caller computes (the rest of backward), in the same order on every rank, and finish()
  // only waits, as PyTorch's hook chains its futures.
  void start(float* grad, comm::Communicator& comm, const ExchangeOptions& opts) override {
    grad_ = grad;
    opts_ = opts;
    if (warming_up(warmup_)) {
      plain_ = true;
      work_ = comm.allreduce(
          Buffer{DType::F32, grad, count_},
          {.op = comm::ReduceOp::Avg, .algorithm = opts.algorithm, .timeout = opts.timeout});
      return;
    }
    plain_ = false;
    add_residual(residual_, grad);
    project(grad, p_.data());
    size_t at = dense_offset_;
    for (const auto& [off, len] : dense_) {
      std::copy(grad + off, grad + off + len, p_.begin() + static_cast<std::ptrdiff_t>(at));
      at += len;
    }
    p_work_ = comm.allreduce(Buffer{DType::F32, p_.data(), p_.size()}, avg());
    if (q_.empty()) {
      work_ = p_work_;
    } else {
      p_work_->then([this](std::exception_ptr e) {
        if (!e) second_factor();
      });
      work_ = comm.allreduce(Buffer{DType::F32, q_.data(), q_.size()}, avg());
    }
    work_->then([this](std::exception_ptr e) {
      if (!e) decode();
    });
  }

  void finish() override {
    auto p = std::move(p_work_);
    auto w = std::move(work_);
    if (p) p->wait();  // its error first, if it is the one that failed
    if (w) w->wait();
  }

 private:
  size_t r_of(const Matrix& m) const { return std::min({rank_, m.rows, m.cols}); }
  // Neither allreduce waits for the caller to come and run it: the caller computes meanwhile.
  comm::AllreduceOptions avg() const {
    return {.op = comm::ReduceOp::Avg,
            .algorithm = opts_.algorithm,
            .timeout = opts_.timeout,
            .prompt = true};
  }

  // P has been averaged: Q = M^T P from P's orthonormal basis, for Q's allreduce.
  void second_factor() {
    for (const auto& m : matrices_) orthonormalise(p_.data() + m.p_offset, m.rows, r_of(m));
    back_project(grad_, p_.data(), q_.data());
  }

  // Both factors have been averaged: the gradient becomes P Q^T (the dense tensors their
  // average), the residual what that dropped.
  void decode() {
    if (!residual_.empty()) std::copy(grad_, grad_ + count_, residual_.begin());
    reconstruct(p_.data(), q_.data(), grad_);
    size_t at = dense_offset_;
    for (const auto& [off, len] : dense_) {
      std::copy(p_.begin() + static_cast<std::ptrdiff_t>(at),
                p_.begin() + static_cast<std::ptrdiff_t>(at + len), grad_ + off);
      at += len;
    }
    if (!residual_.empty()) {
      for (const auto& m : matrices_) {
        for (size_t i = m.offset; i < m.offset + m.rows * m.cols; ++i) {
          // A gradient that was not finite leaves nothing to carry: it would poison every step.
          const float left = residual_[i] - grad_[i];
          residual_[i] = std::isfinite(left) ? left : 0.0f;
        }
      }
      for (const auto& [off, len] : dense_) std::fill_n(residual_.begin() + off, len, 0.0f);
    }
    // Q averaged from a gradient that was not finite would make every later P = M Q so: the
    // warm start begins again, from the same values on every rank (Q is the same everywhere).
    if (!std::all_of(q_.begin(), q_.end(), [](float v) { return std::isfinite(v); })) {
      fill_q(++restarts_);
    }
  }

  // Q's starting values: the same on every rank for the same seed and restart.
  void fill_q(uint64_t restart) {
    std::mt19937_64 gen(seed_ + restart * 0x9e3779b97f4a7c15ull);
    std::normal_distribution<float> normal;
    for (auto& v : q_) v = normal(gen);
  }

  // P = M Q for every matrix.
  void project(const float* x, float* p) const {
    for (const auto& m : matrices_) {
      const int rows = static_cast<int>(m.rows), cols = static_cast<int>(m.cols),
                r = static_cast<int>(r_of(m));
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, r, cols, 1.0f, x + m.offset,
                  cols, q_.data() + m.q_offset, r, 0.0f, p + m.p_offset, r);
    }
  }
  // Q = M^T P for every matrix.
  void back_project(const float* x, const float* p, float* q) const {
    for (const auto& m : matrices_) {
      const int rows = static_cast<int>(m.rows), cols = static_cast<int>(m.cols),
                r = static_cast<int>(r_of(m));
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, r, rows, 1.0f, x + m.offset, cols,
                  p + m.p_offset, r, 0.0f, q + m.q_offset, r);
    }
  }
  // out = P Q^T for every matrix.
  void reconstruct(const float* p, const float* q, float* out) const {
    for (const auto& m : matrices_) {
      const int rows = static_cast<int>(m.rows), cols = static_cast<int>(m.cols),
                r = static_cast<int>(r_of(m));
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, r, 1.0f, p + m.p_offset, r,
                  q + m.q_offset, r, 0.0f, out + m.offset, cols);
    }
  }
  // Gram-Schmidt on the r columns of a rows x r row-major matrix, each column orthogonalised
  // twice ("twice is enough"): when M has rank below r, a column is left with rounding noise
  // only, and one pass would leave that noise far from orthogonal once normalised. A column that
  // vanishes entirely stays zero rather than dividing by zero (the 1e-8 of PyTorch's hook).
  static void orthonormalise(float* p, size_t rows, size_t r) {
    const int n = static_cast<int>(rows), ld = static_cast<int>(r);
    for (size_t j = 0; j < r; ++j) {
      float* col = p + j;
      for (int pass = 0; pass < 2; ++pass) {
        for (size_t l = 0; l < j; ++l) {
          const float d = cblas_sdot(n, p + l, ld, col, ld);
          cblas_saxpy(n, -d, p + l, ld, col, ld);
        }
        const float norm = cblas_snrm2(n, col, ld);
        cblas_sscal(n, 1.0f / (norm + 1e-8f), col, ld);
      }
    }
  }

  size_t rank_;
  int64_t warmup_;
  std::vector<Matrix> matrices_;
  std::vector<std::pair<size_t, size_t>> dense_;  // (offset, length)
  size_t p_size_ = 0, q_size_ = 0, dense_offset_ = 0;
  std::vector<float> p_, q_;
  uint64_t seed_ = 0;
  uint64_t restarts_ = 0;  // of Q's warm start, after a gradient that was not finite
  bool plain_ = false;
  float* grad_ = nullptr;
  ExchangeOptions opts_;
  std::shared_ptr<comm::Work> p_work_, work_;
};

}  // namespace

std::unique_ptr<Codec> make_powersgd_codec(const CompressionOptions& o, size_t count,
                                           std::vector<TensorShape> shapes, size_t bucket) {
  return std::make_unique<PowerSgdCodec>(count, o.powersgd_rank, o.powersgd_warmup_steps,
                                         o.error_feedback, std::move(shapes),
                                         o.seed * 0x9e3779b97f4a7c15ull + bucket + 1);
}

}  // namespace cohort::compress
