#include "cohort/compress/codec.h"

#include <cstring>

#include "cohort/base/error.h"
#include "cohort/compress/codecs.h"

namespace cohort::compress {
namespace {

constexpr Method kMethods[] = {Method::None, Method::Fp16, Method::Bf16,
                               Method::Int8, Method::TopK, Method::PowerSgd};

// No compression: a plain f32 allreduce (Avg).
class PlainCodec final : public Codec {
 public:
  explicit PlainCodec(size_t count) : Codec(count) {}
  Method method() const override { return Method::None; }
  void round_trip(const float* x, float* out) override { std::copy(x, x + count_, out); }
  void start(float* grad, comm::Communicator& comm, const ExchangeOptions& opts) override {
    work_ = comm.allreduce(
        Buffer{DType::F32, grad, count_},
        {.op = comm::ReduceOp::Avg, .algorithm = opts.algorithm, .timeout = opts.timeout});
  }
  void finish() override {
    auto w = std::move(work_);
    if (w) w->wait();
  }

 private:
  std::shared_ptr<comm::Work> work_;
};

}  // namespace

std::string_view method_name(Method m) {
  switch (m) {
    case Method::None:
      return "none";
    case Method::Fp16:
      return "fp16";
    case Method::Bf16:
      return "bf16";
    case Method::Int8:
      return "int8";
    case Method::TopK:
      return "topk";
    case Method::PowerSgd:
      return "powersgd";
  }
  return "?";
}

Method parse_method(std::string_view s) {
  std::string all;
  for (Method m : kMethods) {
    if (method_name(m) == s) return m;
    all += (all.empty() ? "" : ", ") + std::string(method_name(m));
  }
  throw ConfigError("unknown compression \"" + std::string(s) + "\"; expected one of " + all);
}

namespace {
constexpr uint32_t kStateMagic = 0x31534443;  // "CDS1"
}  // namespace

std::string Codec::save_state() const {
  std::string out;
  auto put = [&out](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
  const uint32_t magic = kStateMagic;
  const auto method = static_cast<uint8_t>(this->method());
  const uint64_t count = count_, residual = residual_.size();
  put(&magic, sizeof(magic));
  put(&method, sizeof(method));
  put(&count, sizeof(count));
  put(&residual, sizeof(residual));
  put(residual_.data(), residual_.size() * sizeof(float));
  ByteWriter extra;
  save_extra(extra);
  put(extra.bytes().data(), extra.bytes().size());
  return out;
}

void Codec::load_state(std::string_view state) {
  ByteReader r(reinterpret_cast<const uint8_t*>(state.data()), state.size());
  try {
    if (r.get<uint32_t>() != kStateMagic) throw Error("codec state: not a codec state");
    const auto method = static_cast<Method>(r.get<uint8_t>());
    if (method != this->method()) {
      throw Error("codec state: of " + std::string(method_name(method)) + ", this bucket's is " +
                  std::string(method_name(this->method())));
    }
    const auto count = r.get<uint64_t>();
    if (count != count_) {
      throw Error("codec state: of a bucket of " + std::to_string(count) +
                  " values, this one has " + std::to_string(count_));
    }
    const auto residual = r.get<uint64_t>();
    if (residual != 0 && residual != count_) {
      throw Error("codec state: a residual of " + std::to_string(residual) +
                  " values in a bucket of " + std::to_string(count_));
    }
    const uint8_t* values = r.get_bytes(residual * sizeof(float));
    if (!residual_.empty()) {
      if (residual == 0) {
        std::fill(residual_.begin(), residual_.end(), 0.0f);
      } else {
        std::memcpy(residual_.data(), values, residual * sizeof(float));
      }
    }
    load_extra(r);
    if (!r.done()) throw Error("codec state: " + std::to_string(r.remaining()) + " bytes too many");
  } catch (const ProtocolError&) {
    throw Error("codec state: truncated (" + std::to_string(state.size()) + " bytes)");
  }
}

void add_residual(const std::vector<float>& residual, float* x) {
  for (size_t i = 0; i < residual.size(); ++i) x[i] += residual[i];
}

std::unique_ptr<Codec> make_plain_codec(size_t count) {
  return std::make_unique<PlainCodec>(count);
}

std::unique_ptr<Codec> make_codec(const CompressionOptions& options, size_t count,
                                  std::vector<TensorShape> shapes, int rank, size_t bucket) {
  if (options.method == Method::None || count * sizeof(float) < options.min_bytes) {
    return make_plain_codec(count);
  }
  switch (options.method) {
    case Method::Fp16:
    case Method::Bf16:
    case Method::Int8:
      return make_quantized_codec(options, count, rank, bucket);
    case Method::TopK:
      return make_topk_codec(options, count, std::move(shapes));
    case Method::PowerSgd:
      return make_powersgd_codec(options, count, std::move(shapes), bucket);
    case Method::None:
      break;
  }
  return make_plain_codec(count);
}

}  // namespace cohort::compress
