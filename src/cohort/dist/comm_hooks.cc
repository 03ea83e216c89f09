#include "cohort/dist/comm_hooks.h"

#include "cohort/base/error.h"
#include "cohort/comm/flight_recorder.h"
#include "cohort/dist/process_group.h"

namespace cohort::dist {

CompressionHooks::CompressionHooks(const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                                   compress::CompressionOptions options)
    : group_(group),
      cohort_(dynamic_cast<ProcessGroupCohort*>(group.get())),
      options_(std::move(options)) {
  if (!cohort_) {
    throw ConfigError("cohort.hooks: the process group must be one of the cohort backend, not " +
                      (group ? group->getBackendName() : std::string("none")));
  }
  thread_ = std::thread([this] { loop(); });
}

CompressionHooks::~CompressionHooks() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CompressionHooks::start(compress::Method method, const at::Tensor& buffer, size_t index,
                             const std::vector<at::Tensor>& gradients,
                             const std::vector<at::Tensor>& parameters,
                             std::function<void(const std::string&)> done) {
  if (buffer.scalar_type() != at::kFloat || !buffer.is_contiguous() || !buffer.device().is_cpu()) {
    throw ConfigError("cohort.hooks: " + std::string(compress::method_name(method)) +
                      " compresses contiguous float32 CPU buckets only");
  }
  Bucket& bucket = buckets_[{index, static_cast<int>(method)}];
  std::vector<const void*> layout;
  layout.reserve(parameters.size());
  for (const at::Tensor& p : parameters) layout.push_back(p.unsafeGetTensorImpl());
  auto& codec = bucket.codec;
  const auto count = static_cast<size_t>(buffer.numel());
  if (!codec || codec->count() != count || bucket.parameters != layout) {
    bucket.parameters = std::move(layout);
    // Each gradient as rows x cols (its first dimension by the rest), as Cohort's DDP does.
    std::vector<compress::TensorShape> shapes;
    size_t offset = 0;
    for (const at::Tensor& g : gradients) {
      const auto numel = static_cast<size_t>(g.numel());
      const size_t rows = g.dim() >= 2 ? static_cast<size_t>(g.size(0)) : 1;
      shapes.push_back({offset, rows, rows ? numel / rows : 0});
      offset += numel;
    }
    if (offset != count) shapes.clear();  // not DDP's layout: one tensor
    compress::CompressionOptions o = options_;
    o.method = method;
    codec = compress::make_codec(o, count, std::move(shapes), group_->getRank(), index);
  }
  if (trace::ExchangeClock* clock = cohort_->exchange_clock()) {
    clock->future_issued(comm::now_us());
  }
  codec->start(buffer.data_ptr<float>(), cohort_->communicator(), {});
  std::vector<std::function<void(const std::string&)>> finished;
  {
    std::lock_guard lk(mu_);
    pending_.push_back({codec.get(), std::move(done)});
    finished.swap(finished_);
  }  // `finished` is dropped here, on the caller's thread
  cv_.notify_one();
}

void CompressionHooks::loop() {
  for (;;) {
    Pending p;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !pending_.empty(); });
      if (pending_.empty()) return;
      p = std::move(pending_.front());
      pending_.pop_front();
    }
    std::string error;
    try {
      p.codec->finish();
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (trace::ExchangeClock* clock = cohort_->exchange_clock()) {
      clock->future_finished(comm::now_us());
    }
    p.done(error);
    std::lock_guard lk(mu_);
    finished_.push_back(std::move(p.done));
  }
}

}  // namespace cohort::dist
