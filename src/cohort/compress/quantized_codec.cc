// fp16, bf16 and int8: every value travels in the compact format and is summed in f32
// (comm::allreduce_encoded); the residual it reports is what this rank's encodings dropped.
#include <memory>

#include "cohort/compress/codecs.h"
#include "cohort/compress/formats.h"

namespace cohort::compress {
namespace {

class QuantizedCodec final : public Codec {
 public:
  QuantizedCodec(Method method, std::unique_ptr<comm::Encoding> encoding, size_t count,
                 bool error_feedback)
      : Codec(count),
        method_(method),
        encoding_(std::move(encoding)),
        int8_(dynamic_cast<Int8Encoding*>(encoding_.get())) {
    if (error_feedback) residual_.assign(count, 0.0f);
  }
  Method method() const override { return method_; }

 protected:
  // int8's stochastic rounding stream.
  void save_extra(ByteWriter& w) const override {
    if (int8_) w.put<uint64_t>(int8_->calls());
  }
  void load_extra(ByteReader& r) override {
    if (int8_) int8_->set_calls(r.get<uint64_t>());
  }

 public:
  void round_trip(const float* x, float* out) override {
    std::vector<uint8_t> bytes(encoding_->encoded_bytes(count_));
    encoding_->encode(x, count_, bytes.data());
    encoding_->decode(bytes.data(), count_, out);
  }

  void start(float* grad, comm::Communicator& comm, const ExchangeOptions& opts) override {
    add_residual(residual_, grad);
    Buffer res{};
    if (!residual_.empty()) res = Buffer{DType::F32, residual_.data(), residual_.size()};
    work_ = comm.allreduce_encoded(
        Buffer{DType::F32, grad, count_}, *encoding_,
        {.op = comm::ReduceOp::Avg, .residual = res, .timeout = opts.timeout});
  }

  void finish() override {
    auto w = std::move(work_);
    if (w) w->wait();
  }

 private:
  Method method_;
  std::unique_ptr<comm::Encoding> encoding_;
  Int8Encoding* int8_;  // encoding_ when it is int8, else null
  std::shared_ptr<comm::Work> work_;
};

}  // namespace

std::unique_ptr<Codec> make_quantized_codec(const CompressionOptions& o, size_t count, int rank,
                                            size_t bucket) {
  std::unique_ptr<comm::Encoding> enc;
  if (o.method == Method::Fp16) {
    enc = std::make_unique<Fp16Encoding>();
  } else if (o.method == Method::Bf16) {
    enc = std::make_unique<Bf16Encoding>();
  } else {
    // Rounding noise must be independent across ranks and buckets, or it would not average out.
    const uint64_t seed = o.seed * 0x9e3779b97f4a7c15ull + (static_cast<uint64_t>(rank) << 32) +
                          static_cast<uint64_t>(bucket);
    enc = std::make_unique<Int8Encoding>(o.int8_chunk, o.int8_stochastic_rounding, seed);
  }
  return std::make_unique<QuantizedCodec>(o.method, std::move(enc), count, o.error_feedback);
}

}  // namespace cohort::compress
