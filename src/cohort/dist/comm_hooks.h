// Cohort's gradient codecs (compress/) as torch DDP communication hooks: each bucket DDP hands
// its hook is averaged over the group in the codec's compact form, with error feedback per bucket,
// by a Codec kept for that bucket (the same codecs, bit for bit, as Cohort's own DDP). The Python
// side (cohort/hooks.py) returns a torch future that completes with the averaged bucket.
//
// start() issues the bucket's collectives at once (they run on the communicator's thread while
// backward goes on); a thread of this object waits for them in bucket order and then calls the
// caller's `done` with the bucket (or the error's message).
#pragma once

#include <ATen/ATen.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <vector>

#include "cohort/compress/codec.h"

namespace cohort::dist {

class ProcessGroupCohort;

class CompressionHooks {
 public:
  // ConfigError unless `group` is a group of the cohort backend.
  CompressionHooks(const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                   compress::CompressionOptions options);
  ~CompressionHooks();
  CompressionHooks(const CompressionHooks&) = delete;
  CompressionHooks& operator=(const CompressionHooks&) = delete;

  // Starts averaging `buffer` (DDP's flat f32 bucket `index`, whose tensors are `gradients`, of
  // `parameters`) with `method`; `done(error)` runs on this object's thread once it holds the
  // average (error empty) or the exchange failed. A bucket index whose parameters changed (DDP
  // rebuilds its buckets after the first step, in the order gradients became ready) gets a new
  // codec: the residual of the old layout belongs to other coordinates, and is dropped.
  void start(compress::Method method, const at::Tensor& buffer, size_t index,
             const std::vector<at::Tensor>& gradients, const std::vector<at::Tensor>& parameters,
             std::function<void(const std::string& error)> done);

 private:
  // Nothing that holds a Python object may be dropped on this object's thread (that would take
  // the GIL, which an exiting interpreter never gives back): a pending exchange holds no tensor,
  // and the callbacks, which may hold a future and its value, are dropped by the next start() or
  // the destructor, on the caller's thread.
  struct Pending {
    compress::Codec* codec;
    std::function<void(const std::string&)> done;
  };
  void loop();

  c10::intrusive_ptr<c10d::ProcessGroup> group_;  // keeps the communicator alive
  ProcessGroupCohort* cohort_;
  compress::CompressionOptions options_;
  struct Bucket {
    std::unique_ptr<compress::Codec> codec;
    std::vector<const void*> parameters;  // whose gradients it holds, in order (TensorImpl)
  };
  std::map<std::pair<size_t, int>, Bucket> buckets_;  // (bucket index, method)
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> pending_;
  std::vector<std::function<void(const std::string&)>> finished_;  // run, to be dropped
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace cohort::dist
