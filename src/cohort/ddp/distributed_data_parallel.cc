#include "cohort/ddp/distributed_data_parallel.h"

#include <torch/serialize.h>
#include <torch/torch.h>

#include <cstdio>
#include <map>
#include <sstream>

#include "cohort/base/bytes.h"
#include "cohort/base/checksum.h"
#include "cohort/base/clock.h"
#include "cohort/base/error.h"

namespace cohort::ddp {

DType to_comm_dtype(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat32:
      return DType::F32;
    case torch::kFloat64:
      return DType::F64;
    case torch::kFloat16:
      return DType::F16;
    case torch::kBFloat16:
      return DType::BF16;
    case torch::kInt32:
      return DType::I32;
    case torch::kInt64:
      return DType::I64;
    default:
      throw Error(std::string("tensors of type ") + c10::toString(t.scalar_type()) +
                  " cannot be communicated");
  }
}

Buffer as_buffer(const torch::Tensor& t) {
  if (!t.is_contiguous()) throw Error("as_buffer: tensor is not contiguous");
  return Buffer{to_comm_dtype(t), t.data_ptr(), static_cast<size_t>(t.numel())};
}

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                                                 comm::Communicator& comm, DdpOptions options)
    : module_(std::move(module)), comm_(comm), options_(options) {
  for (auto& p : module_->parameters(/*recurse=*/true)) {
    if (!p.requires_grad()) continue;
    params_.push_back(ParamSlot{p});
  }
  if (options_.broadcast_on_construct) broadcast_parameters(0);
  build_buckets();
  build_buffer_groups();
}

std::string_view buffer_sync_name(BufferSync s) {
  switch (s) {
    case BufferSync::Broadcast:
      return "broadcast";
    case BufferSync::Average:
      return "average";
    case BufferSync::None:
      return "none";
  }
  return "?";
}

BufferSync parse_buffer_sync(std::string_view name) {
  for (BufferSync s : {BufferSync::Broadcast, BufferSync::Average, BufferSync::None}) {
    if (buffer_sync_name(s) == name) return s;
  }
  throw Error("unknown buffer synchronisation '" + std::string(name) +
              "' (expected broadcast, average or none)");
}

DistributedDataParallel::~DistributedDataParallel() {
  // Hooks capture `this`; drop them so a module that outlives us does not call into freed memory.
  for (auto& s : params_) {
    if (s.param.defined()) s.param.remove_hook(s.hook);
  }
  // Drain in-flight exchanges: their buffers are ours.
  for (auto& b : buckets_) {
    try {
      wait(b);
    } catch (const std::exception&) {
      // The error was or will be reported by the communicator's users.
    }
  }
  for (auto& g : buffer_groups_) {
    try {
      if (auto w = std::move(g.work)) w->wait();
    } catch (const std::exception&) {
      // As above.
    }
  }
}

void DistributedDataParallel::build_buckets() {
  // Reverse registration order approximates the order in which backward produces gradients.
  // Buckets group parameters of one dtype; the first bucket is small so communication starts early.
  Bucket current;
  size_t current_bytes = 0;
  auto capacity = [&] {
    return buckets_.empty() ? options_.first_bucket_bytes : options_.bucket_bytes;
  };
  std::vector<std::pair<size_t, size_t>> members;  // (param index, numel)
  auto flush = [&] {
    if (current.params.empty()) return;
    int64_t total = 0;
    for (size_t k = 0; k < current.params.size(); ++k) {
      current.offsets.push_back(total);
      total += params_[current.params[k]].param.numel();
    }
    current.flat =
        torch::zeros({total}, params_[current.params[0]].param.options().requires_grad(false));
    if (current.flat.scalar_type() == torch::kFloat32) {
      // Each tensor as rows x cols (its first dimension by the rest): PowerSGD compresses each
      // matrix on its own and passes vectors through.
      std::vector<compress::TensorShape> shapes;
      for (size_t k = 0; k < current.params.size(); ++k) {
        const auto& p = params_[current.params[k]].param;
        const size_t numel = static_cast<size_t>(p.numel());
        const size_t rows = p.dim() >= 2 ? static_cast<size_t>(p.size(0)) : 1;
        shapes.push_back({static_cast<size_t>(current.offsets[k]), rows, rows ? numel / rows : 0});
      }
      current.codec = compress::make_codec(options_.compression, static_cast<size_t>(total),
                                           std::move(shapes), comm_.rank(), buckets_.size());
    }
    for (size_t k = 0; k < current.params.size(); ++k) {
      params_[current.params[k]].bucket = buckets_.size();
      params_[current.params[k]].index_in_bucket = k;
    }
    buckets_.push_back(std::move(current));
    current = Bucket{};
    current_bytes = 0;
  };
  // A bucket is closed once it holds its capacity (PyTorch's rule), not before a tensor that
  // would take it past it: a large tensor then shares the bucket of the small ones produced just
  // before it and starts on the wire as soon as it is ready, instead of waiting in the next bucket
  // for every gradient after it (the cnn's first linear layer, 1.6 MB, waited for the whole
  // convolutional backward).
  for (size_t i = params_.size(); i-- > 0;) {
    const auto& p = params_[i].param;
    size_t bytes = static_cast<size_t>(p.numel()) * p.element_size();
    if (!current.params.empty() &&
        params_[current.params[0]].param.scalar_type() != p.scalar_type()) {
      flush();
    }
    current.params.push_back(i);
    current_bytes += bytes;
    if (current_bytes >= capacity()) flush();
  }
  flush();

  for (size_t i = 0; i < params_.size(); ++i) {
    params_[i].hook = params_[i].param.register_hook(
        [this, i](const torch::Tensor& grad) { on_gradient(i, grad); });
  }
}

void DistributedDataParallel::build_buffer_groups() {
  if (options_.buffers == BufferSync::None || comm_.size() == 1) return;
  std::map<c10::ScalarType, BufferGroup> groups;
  for (const auto& item : module_->named_buffers(/*recurse=*/true)) {
    const torch::Tensor& b = item.value();
    if (b.numel() == 0) continue;
    try {
      (void)to_comm_dtype(b);
    } catch (const Error& e) {
      throw Error("buffer '" + item.key() + "': " + e.what() +
                  "; synchronise buffers of other types yourself (DdpOptions::buffers = None)");
    }
    groups[b.scalar_type()].tensors.push_back(b);
  }
  for (auto& [type, g] : groups) {
    int64_t total = 0;
    for (const auto& t : g.tensors) total += t.numel();
    g.flat = torch::empty({total}, g.tensors[0].options().requires_grad(false));
    buffer_groups_.push_back(std::move(g));
  }
}

void DistributedDataParallel::launch_buffer_sync() {
  torch::NoGradGuard no_grad;
  for (auto& g : buffer_groups_) {
    if (auto w = std::move(g.work)) w->wait();  // left by a backward that threw
    int64_t off = 0;
    for (const auto& t : g.tensors) {
      g.flat.narrow(0, off, t.numel()).copy_(t.detach().reshape({-1}));
      off += t.numel();
    }
    const bool average = options_.buffers == BufferSync::Average && g.flat.is_floating_point();
    if (average) {
      g.work = comm_.allreduce(as_buffer(g.flat), {.op = comm::ReduceOp::Avg,
                                                   .algorithm = options_.algorithm,
                                                   .timeout = options_.timeout});
    } else {
      g.work = comm_.broadcast(as_buffer(g.flat), {.root = 0, .timeout = options_.timeout});
    }
    comm_.flight_recorder().set_label(g.work->sequence(), "buffers");
  }
}

void DistributedDataParallel::finish_buffer_sync() {
  torch::NoGradGuard no_grad;
  for (auto& g : buffer_groups_) {
    auto w = std::move(g.work);
    if (!w) continue;
    w->wait();
    int64_t off = 0;
    for (auto& t : g.tensors) {
      t.detach().copy_(g.flat.narrow(0, off, t.numel()).view(t.sizes()));
      off += t.numel();
    }
  }
}

std::vector<std::vector<size_t>> DistributedDataParallel::bucket_layout() const {
  std::vector<std::vector<size_t>> out;
  for (const auto& b : buckets_) out.push_back(b.params);
  return out;
}

void DistributedDataParallel::start_backward() {
  for (auto& b : buckets_) {
    b.pending = b.params.size();
    b.work.reset();
    b.launched = false;
  }
  for (auto& s : params_) s.ready = false;
  comm_before_ = comm_.stats();
  next_to_launch_ = 0;
  in_backward_ = true;
}

void DistributedDataParallel::on_gradient(size_t i, const torch::Tensor& grad) {
  if (!in_backward_) return;  // a backward outside DDP's control: leave gradients local
  auto& slot = params_[i];
  auto& b = buckets_[slot.bucket];
  if (slot.ready) {
    throw Error("parameter " + std::to_string(i) +
                " received two gradients in one backward; call backward once per step");
  }
  slot.ready = true;
  int64_t off = b.offsets[slot.index_in_bucket];
  b.flat.narrow(0, off, grad.numel()).view(grad.sizes()).copy_(grad);
  if (--b.pending == 0) launch_ready_buckets();
}

void DistributedDataParallel::launch_ready_buckets() {
  // Launch in bucket order only: every rank issues the same collectives in the same order.
  while (next_to_launch_ < buckets_.size() && buckets_[next_to_launch_].pending == 0) {
    launch(buckets_[next_to_launch_++]);
  }
}

void DistributedDataParallel::launch(Bucket& b) {
  b.launched = true;
  const auto index = static_cast<size_t>(&b - buckets_.data());
  if (options_.on_bucket_ready) {
    options_.on_bucket_ready(index, static_cast<size_t>(b.flat.numel()) * b.flat.element_size());
  }
  const int n = comm_.size();
  stats_.uncompressed_bytes += static_cast<uint64_t>(b.flat.numel()) * b.flat.element_size() * 2 *
                               static_cast<uint64_t>(n - 1) / static_cast<uint64_t>(n);
  if (b.codec) {
    const uint64_t before = comm_.flight_recorder().newest();
    b.codec->start(b.flat.data_ptr<float>(), comm_,
                   {.algorithm = options_.algorithm, .timeout = options_.timeout});
    label_collectives_since(before, index);
    return;
  }
  b.work = comm_.allreduce(
      as_buffer(b.flat),
      {.op = comm::ReduceOp::Avg, .algorithm = options_.algorithm, .timeout = options_.timeout});
  comm_.flight_recorder().set_label(b.work->sequence(), "bucket " + std::to_string(index));
}

void DistributedDataParallel::label_collectives_since(uint64_t before, size_t bucket) {
  comm::FlightRecorder& fr = comm_.flight_recorder();
  const std::string label = "bucket " + std::to_string(bucket);
  for (uint64_t seq = before + 1, last = fr.newest(); seq <= last; ++seq) fr.set_label(seq, label);
}

void DistributedDataParallel::wait(Bucket& b) {
  if (!b.launched) return;
  b.launched = false;
  if (b.codec) {
    b.codec->finish();  // its collectives were all issued, and labelled, by start()
  } else if (auto w = std::move(b.work)) {
    w->wait();
  }
}

void DistributedDataParallel::finish_backward() {
  if (!in_backward_) throw Error("finish_backward() without start_backward()");
  in_backward_ = false;
  // Parameters that took no part in this step's loss contribute zeros, so every rank still issues
  // every bucket's allreduce.
  for (auto& b : buckets_) {
    if (b.pending == 0) continue;
    for (size_t k = 0; k < b.params.size(); ++k) {
      auto& slot = params_[b.params[k]];
      if (!slot.ready) {
        b.flat.narrow(0, b.offsets[k], slot.param.numel()).zero_();
        slot.ready = true;
      }
    }
    b.pending = 0;
  }
  launch_ready_buckets();

  auto t0 = Clock::now();
  for (auto& b : buckets_) wait(b);
  // Gradient bytes only (DdpStats): counted before the buffers' collectives, which follow the
  // buckets' on every rank. Their time is synchronisation too.
  const comm::CommStats now = comm_.stats();
  stats_.bytes_sent += now.bytes_sent - comm_before_.bytes_sent;
  stats_.bytes_received += now.bytes_received - comm_before_.bytes_received;
  launch_buffer_sync();
  finish_buffer_sync();
  stats_.wait_seconds += std::chrono::duration<double>(Clock::now() - t0).count();

  torch::NoGradGuard no_grad;
  for (auto& b : buckets_) {
    for (size_t k = 0; k < b.params.size(); ++k) {
      auto& p = params_[b.params[k]].param;
      auto avg = b.flat.narrow(0, b.offsets[k], p.numel()).view(p.sizes());
      if (p.grad().defined()) {
        p.mutable_grad().copy_(avg);
      } else {
        p.mutable_grad() = avg.clone();
      }
    }
  }
  stats_.buckets_reduced += buckets_.size();
  stats_.steps += 1;
}

void DistributedDataParallel::backward(const torch::Tensor& loss) {
  start_backward();
  try {
    loss.backward();
  } catch (...) {
    in_backward_ = false;
    throw;
  }
  finish_backward();
}

void DistributedDataParallel::set_step(int64_t step) {
  for (Bucket& b : buckets_) {
    if (b.codec) b.codec->set_step(step);
  }
}

void DistributedDataParallel::broadcast_parameters(int root) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> tensors;
  for (auto& p : module_->parameters(true)) tensors.push_back(p);
  for (auto& b : module_->buffers(true)) tensors.push_back(b);
  // One broadcast per dtype group of flattened tensors instead of one per tensor.
  std::map<c10::ScalarType, std::vector<torch::Tensor>> groups;
  for (auto& t : tensors) groups[t.scalar_type()].push_back(t);
  for (auto& [type, group] : groups) {
    std::vector<torch::Tensor> flat_parts;
    for (auto& t : group) flat_parts.push_back(t.detach().reshape({-1}));
    auto flat = torch::cat(flat_parts).contiguous();
    comm_.broadcast(as_buffer(flat), {.root = root, .timeout = options_.timeout})->wait();
    int64_t off = 0;
    for (auto& t : group) {
      t.detach().copy_(flat.narrow(0, off, t.numel()).view(t.sizes()));
      off += t.numel();
    }
  }
}

void DistributedDataParallel::average_parameters() {
  torch::NoGradGuard no_grad;
  const auto t0 = Clock::now();
  const comm::CommStats before = comm_.stats();
  std::map<c10::ScalarType, std::vector<torch::Tensor>> groups;
  for (auto& s : params_) groups[s.param.scalar_type()].push_back(s.param);
  const double n = comm_.size();
  for (auto& [type, group] : groups) {
    std::vector<torch::Tensor> parts;
    for (auto& t : group) parts.push_back(t.detach().reshape({-1}));
    auto flat = torch::cat(parts).contiguous();
    comm_
        .allreduce(as_buffer(flat), {.op = comm::ReduceOp::Avg,
                                     .algorithm = options_.algorithm,
                                     .timeout = options_.timeout})
        ->wait();
    int64_t off = 0;
    for (auto& t : group) {
      t.detach().copy_(flat.narrow(0, off, t.numel()).view(t.sizes()));
      off += t.numel();
    }
    stats_.uncompressed_bytes +=
        static_cast<uint64_t>(2 * (n - 1) / n * static_cast<double>(flat.nbytes()));
  }
  launch_buffer_sync();
  finish_buffer_sync();
  const comm::CommStats after = comm_.stats();
  stats_.bytes_sent += after.bytes_sent - before.bytes_sent;
  stats_.bytes_received += after.bytes_received - before.bytes_received;
  stats_.wait_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string DistributedDataParallel::broadcast_bytes(const std::string& bytes, int root) {
  int64_t len = static_cast<int64_t>(bytes.size());
  comm_.broadcast(Buffer{DType::I64, &len, 1}, {.root = root, .timeout = options_.timeout})->wait();
  // Bytes travel as whole i64 words.
  std::vector<int64_t> words(static_cast<size_t>((len + 7) / 8), 0);
  if (comm_.rank() == root) std::memcpy(words.data(), bytes.data(), bytes.size());
  comm_
      .broadcast(Buffer{DType::I64, words.data(), words.size()},
                 {.root = root, .timeout = options_.timeout})
      ->wait();
  return std::string(reinterpret_cast<const char*>(words.data()), static_cast<size_t>(len));
}

std::vector<std::string> DistributedDataParallel::gather_bytes(const std::string& bytes, int root) {
  // The tag of these messages; DDP sends no other point-to-point message.
  constexpr uint32_t kTag = 0x47415448;  // "GATH"
  const comm::PointToPointOptions opts{.tag = kTag, .timeout = options_.timeout};
  auto words_of = [](const std::string& s) {  // whole i64 words
    std::vector<int64_t> w((s.size() + 7) / 8, 0);
    if (!s.empty()) std::memcpy(w.data(), s.data(), s.size());
    return w;
  };
  if (comm_.rank() != root) {
    int64_t len = static_cast<int64_t>(bytes.size());
    std::vector<int64_t> words = words_of(bytes);
    comm_.send(Buffer{DType::I64, &len, 1}, root, opts)->wait();
    if (!words.empty()) {
      comm_.send(Buffer{DType::I64, words.data(), words.size()}, root, opts)->wait();
    }
    return {};
  }
  std::vector<std::string> out(static_cast<size_t>(comm_.size()));
  out[static_cast<size_t>(root)] = bytes;
  for (int r = 0; r < comm_.size(); ++r) {
    if (r == root) continue;
    int64_t len = 0;
    comm_.recv(Buffer{DType::I64, &len, 1}, r, opts)->wait();
    if (len < 0 || len > (int64_t{1} << 40)) {
      throw Error("gather_bytes: rank " + std::to_string(r) + " announced " + std::to_string(len) +
                  " bytes");
    }
    std::vector<int64_t> words(static_cast<size_t>((len + 7) / 8));
    if (!words.empty()) {
      comm_.recv(Buffer{DType::I64, words.data(), words.size()}, r, opts)->wait();
    }
    out[static_cast<size_t>(r)].assign(reinterpret_cast<const char*>(words.data()),
                                       static_cast<size_t>(len));
  }
  return out;
}

std::string DistributedDataParallel::codec_state() const {
  bool any = false;
  for (const auto& b : buckets_)
    any = any || (b.codec && b.codec->method() != compress::Method::None);
  if (!any) return "";
  ByteWriter w;
  w.put<uint32_t>(static_cast<uint32_t>(buckets_.size()));
  for (const auto& b : buckets_) w.put_string(b.codec ? b.codec->save_state() : std::string());
  return std::string(w.bytes().begin(), w.bytes().end());
}

void DistributedDataParallel::load_codec_state(const std::string& state) {
  if (state.empty()) return;
  ByteReader r(reinterpret_cast<const uint8_t*>(state.data()), state.size());
  try {
    const auto n = r.get<uint32_t>();
    if (n != buckets_.size()) {
      throw Error("codec state of " + std::to_string(n) + " buckets, this model has " +
                  std::to_string(buckets_.size()));
    }
    for (size_t i = 0; i < buckets_.size(); ++i) {
      const std::string s = r.get_string();
      if (!buckets_[i].codec || s.empty()) continue;
      try {
        buckets_[i].codec->load_state(s);
      } catch (const Error& e) {
        throw Error("bucket " + std::to_string(i) + ": " + e.what());
      }
    }
  } catch (const ProtocolError&) {
    throw Error("codec state truncated (" + std::to_string(state.size()) + " bytes)");
  }
}

void DistributedDataParallel::broadcast_optimizer_state(torch::optim::Optimizer& optimizer,
                                                        int root) {
  std::string bytes;
  if (comm_.rank() == root) {
    torch::serialize::OutputArchive archive;
    optimizer.save(archive);
    std::ostringstream os;
    archive.save_to(os);
    bytes = os.str();
  }
  bytes = broadcast_bytes(bytes, root);
  if (comm_.rank() != root) {
    torch::serialize::InputArchive archive;
    std::istringstream is(bytes);
    archive.load_from(is);
    optimizer.load(archive);
  }
}

std::string DistributedDataParallel::buffer_digest() const {
  std::string all;
  for (const auto& b : module_->buffers(/*recurse=*/true)) {
    auto t = b.detach().contiguous();
    all.append(static_cast<const char*>(t.data_ptr()), t.numel() * t.element_size());
  }
  Digest d = sha256(all.data(), all.size());
  return to_hex(d.data(), d.size());
}

std::string DistributedDataParallel::parameter_digest() const {
  std::string all;
  for (const auto& s : params_) {
    auto t = s.param.detach().contiguous();
    all.append(static_cast<const char*>(t.data_ptr()), t.numel() * t.element_size());
  }
  Digest d = sha256(all.data(), all.size());
  return to_hex(d.data(), d.size());
}

namespace {

// FNV-1a, 64 bits: a fingerprint of a tensor's bytes (not a defence against tampering).
int64_t fnv1a(const void* data, size_t n) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return static_cast<int64_t>(h);
}

}  // namespace

void DistributedDataParallel::check_parameters(const std::string& when) {
  const int world = comm_.size();
  std::vector<std::string> names;
  std::vector<int64_t> mine;
  auto add = [&](const std::string& name, const torch::Tensor& tensor) {
    auto t = tensor.detach().contiguous();
    names.push_back(name);
    mine.push_back(fnv1a(t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size()));
  };
  for (const auto& item : module_->named_parameters(/*recurse=*/true))
    add(item.key(), item.value());
  // Buffers are compared when they are kept equal (BufferSync::None leaves them each rank's own).
  if (options_.buffers != BufferSync::None) {
    for (const auto& item : module_->named_buffers(/*recurse=*/true)) {
      add(item.key() + " (buffer)", item.value());
    }
  }
  const size_t n = mine.size();
  std::vector<int64_t> all(n * static_cast<size_t>(world));
  comm_
      .allgather(Buffer{DType::I64, mine.data(), n}, Buffer{DType::I64, all.data(), all.size()},
                 {.timeout = options_.timeout})
      ->wait();
  auto hash = [&](int r, size_t i) { return all[static_cast<size_t>(r) * n + i]; };
  for (size_t i = 0; i < n; ++i) {
    // The value most ranks hold (rank 0's on a tie) is the reference; the first rank that
    // differs from it is named.
    int best = 0, best_votes = 0;
    for (int r = 0; r < world; ++r) {
      int votes = 0;
      for (int q = 0; q < world; ++q) votes += hash(q, i) == hash(r, i);
      if (votes > best_votes) best = r, best_votes = votes;
    }
    for (int r = 0; r < world; ++r) {
      if (hash(r, i) == hash(best, i)) continue;
      const std::string& tensor = names[i];
      char hashes[64];
      std::snprintf(hashes, sizeof(hashes), "%016llx vs %016llx",
                    static_cast<unsigned long long>(hash(r, i)),
                    static_cast<unsigned long long>(hash(best, i)));
      throw ReplicaDivergenceError(
          r, tensor,
          "parameters diverged at " + when + ": rank " + std::to_string(r) + "'s '" + tensor +
              "' (tensor " + std::to_string(i) + " of " + std::to_string(names.size()) +
              ") differs from rank " + std::to_string(best) + "'s (hash " + hashes + "); " +
              std::to_string(best_votes) + " of " + std::to_string(world) +
              " ranks agree with rank " + std::to_string(best));
    }
  }
}

}  // namespace cohort::ddp
