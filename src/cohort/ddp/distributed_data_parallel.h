// DistributedDataParallel: data-parallel training of any torch::nn::Module over a Communicator.
//
// Gradients are gathered into buckets in the order autograd produces them (parameters in reverse
// registration order, the order backward visits them). A hook on each parameter copies its gradient
// into its bucket the moment autograd computes it; when a bucket is full it is averaged across
// ranks by an asynchronous allreduce on the communication thread while backward goes on computing
// the gradients of earlier layers. Before the optimizer step, finish_backward() waits for every
// bucket and writes the averaged gradients back into each parameter's .grad().
//
// Buckets are launched strictly in bucket order on every rank, so the collectives' sequence numbers
// line up across ranks. Every element of the averaged gradient is reduced once and copied to all
// ranks, so replicas that start equal stay bitwise equal.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cohort/base/error.h"
#include "cohort/comm/communicator.h"
#include "cohort/compress/codec.h"

namespace cohort::ddp {

// What happens to the module's buffers (BatchNorm's running mean and variance, its batch counter)
// at every step. Forward updates them from each rank's own batch, so without synchronisation the
// replicas' running statistics drift apart and evaluation and checkpoints see rank 0's alone.
enum class BufferSync {
  Broadcast,  // rank 0's buffers go to every rank (PyTorch DDP's broadcast_buffers, its default)
  Average,    // floating-point buffers are averaged over ranks, integer ones come from rank 0
  None,       // buffers stay local
};
std::string_view buffer_sync_name(BufferSync s);      // "broadcast" | "average" | "none"
BufferSync parse_buffer_sync(std::string_view name);  // throws Error for another name

struct DdpOptions {
  // Capacity of each gradient bucket: a bucket is closed once it holds at least this much (in
  // the order backward produces gradients). The first bucket is smaller (first_bucket_bytes) so
  // that communication starts as early as possible in backward.
  size_t bucket_bytes = 25u << 20;
  size_t first_bucket_bytes = 1u << 20;
  comm::Algorithm algorithm = comm::Algorithm::Auto;
  std::chrono::milliseconds timeout{0};  // 0: the communicator's default
  // Broadcast parameters and buffers from rank 0 at construction.
  bool broadcast_on_construct = true;
  // Buffers are synchronised at every backward(), in finish_backward() once the gradients are
  // in (forward has updated the buffers by then; one small collective per buffer dtype), so
  // replicas leave every step with the same buffers.
  BufferSync buffers = BufferSync::Broadcast;
  // Gradient compression of f32 buckets (compress/codec.h); buckets under compression.min_bytes
  // and buckets of other types are averaged uncompressed.
  compress::CompressionOptions compression = {};
  // Called as each bucket's allreduce is launched (its gradients are all in): the timeline.
  std::function<void(size_t bucket, size_t bytes)> on_bucket_ready = {};
};

// Replicas that should be identical are not: names the rank and the first tensor that differs.
class ReplicaDivergenceError : public Error {
 public:
  ReplicaDivergenceError(int rank, std::string tensor, const std::string& what)
      : Error(what), rank_(rank), tensor_(std::move(tensor)) {}
  int rank() const { return rank_; }
  const std::string& tensor() const { return tensor_; }

 private:
  int rank_;
  std::string tensor_;
};

// Time and bytes spent on gradient synchronisation, cumulative.
struct DdpStats {
  double wait_seconds = 0;  // time finish_backward() blocked waiting for allreduces
  uint64_t buckets_reduced = 0;
  uint64_t steps = 0;
  // Bytes this rank's gradient exchanges put on and took off the wire (headers included), and
  // what a bandwidth-optimal f32 allreduce of the same buckets would have sent: 2(n-1)/n of each
  // bucket. compression_ratio() = uncompressed_bytes / bytes_sent.
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t uncompressed_bytes = 0;
  double compression_ratio() const {
    return bytes_sent ? static_cast<double>(uncompressed_bytes) / static_cast<double>(bytes_sent)
                      : 1.0;
  }
};

class DistributedDataParallel {
 public:
  DistributedDataParallel(std::shared_ptr<torch::nn::Module> module, comm::Communicator& comm,
                          DdpOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  torch::nn::Module& module() { return *module_; }

  // loss.backward() with gradient synchronisation: start_backward(), backward, finish_backward().
  void backward(const torch::Tensor& loss);
  void start_backward();
  void finish_backward();

  // The training step of the next backward(): compressed buckets whose method warms up do so
  // only while it is below their warm-up steps (compress::Codec::set_step). A job that resumes at
  // step s calls set_step(s) before its first backward.
  void set_step(int64_t step);

  // Copies rank `root`'s parameters and buffers to every rank.
  void broadcast_parameters(int root = 0);
  // Local SGD's model averaging: every parameter becomes its mean over the ranks (one allreduce
  // per dtype of the flattened parameters), and the buffers are synchronised as at every
  // backward (DdpOptions::buffers). Blocks; its time and bytes count in stats() like a step's
  // gradient exchange. Every rank calls it at the same point.
  void average_parameters();
  // Copies rank `root`'s optimizer state (e.g. momentum buffers) to every rank.
  void broadcast_optimizer_state(torch::optim::Optimizer& optimizer, int root = 0);
  // Copies an opaque byte string from root to every rank (length first, then bytes).
  std::string broadcast_bytes(const std::string& bytes, int root = 0);
  // Every rank's byte string, on `root` (empty elsewhere): each rank sends its length and its
  // bytes to root, which receives them rank by rank.
  std::vector<std::string> gather_bytes(const std::string& bytes, int root = 0);

  // This rank's state of every bucket's codec (compress::Codec::save_state): the residuals of
  // error feedback, PowerSGD's factors, int8's rounding stream. Empty when no bucket keeps any
  // (no compression). load_codec_state restores it into a DDP of the same model, options and
  // rank, and throws Error naming the bucket that does not fit.
  std::string codec_state() const;
  void load_codec_state(const std::string& state);

  // SHA-256 over every parameter's bytes in registration order, hex.
  std::string parameter_digest() const;
  // The same over every buffer (BatchNorm's running statistics).
  std::string buffer_digest() const;
  // Compares a hash of every parameter, and of every buffer unless buffers are left local
  // (BufferSync::None), across ranks (one allgather of one 64-bit hash per tensor). Throws
  // ReplicaDivergenceError naming the rank that differs from the majority (from rank 0 on a tie)
  // and the first differing tensor; `when` goes into the message ("step 20").
  void check_parameters(const std::string& when);

  const DdpStats& stats() const { return stats_; }
  size_t bucket_count() const { return buckets_.size(); }
  // Parameter indices of each bucket (registration order indices), for tests and tracing.
  std::vector<std::vector<size_t>> bucket_layout() const;

 private:
  struct Bucket {
    torch::Tensor flat;                      // contiguous, holds every gradient of the bucket
    std::vector<size_t> params;              // indices into params_
    std::vector<int64_t> offsets;            // element offset of each param in flat
    size_t pending = 0;                      // gradients still to arrive this step
    std::shared_ptr<comm::Work> work;        // the in-flight allreduce (uncompressed buckets)
    std::unique_ptr<compress::Codec> codec;  // f32 buckets: averages them, compressed or not
    bool launched = false;
  };
  struct ParamSlot {
    torch::Tensor param;
    size_t bucket = 0;
    size_t index_in_bucket = 0;
    bool ready = false;
    unsigned hook = 0;
  };

  // The module's buffers of one dtype, flattened for one collective per step.
  struct BufferGroup {
    std::vector<torch::Tensor> tensors;
    torch::Tensor flat;
    std::shared_ptr<comm::Work> work;
  };

  void build_buckets();
  void build_buffer_groups();
  void launch_buffer_sync();
  void finish_buffer_sync();
  void on_gradient(size_t param_index, const torch::Tensor& grad);
  void launch_ready_buckets();
  void launch(Bucket& b);
  // Names the collectives queued after sequence number `before` as this bucket's.
  void label_collectives_since(uint64_t before, size_t bucket);
  void wait(Bucket& b);

  std::shared_ptr<torch::nn::Module> module_;
  comm::Communicator& comm_;
  DdpOptions options_;
  std::vector<ParamSlot> params_;
  std::vector<Bucket> buckets_;
  std::vector<BufferGroup> buffer_groups_;
  size_t next_to_launch_ = 0;
  bool in_backward_ = false;
  comm::CommStats comm_before_;  // the communicator's counters at start_backward()
  DdpStats stats_;
};

// Maps a torch dtype to the communication core's DType (throws for unsupported types).
DType to_comm_dtype(const torch::Tensor& t);
// A Buffer over a contiguous tensor's storage.
Buffer as_buffer(const torch::Tensor& t);

}  // namespace cohort::ddp
