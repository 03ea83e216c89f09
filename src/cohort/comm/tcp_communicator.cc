#include "cohort/comm/tcp_communicator.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>
#include <mutex>
#include <thread>

#include "cohort/base/error.h"
#include "cohort/comm/mesh_pairs.h"
#include "cohort/comm/reduce.h"

namespace cohort::comm {
namespace {

// The most that diagnosing a failure adds to an operation's deadline: the grace period of a timeout
// (at most 2 s), plus the store round trips.
constexpr Millis kDiagnosisBound{3000};

std::string join(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

// Failure records in the store: "<culprit rank>\n<message>".
std::string encode_record(int culprit, const std::string& what) {
  return std::to_string(culprit) + "\n" + what;
}
bool decode_record(const std::string& s, int* culprit, std::string* what) {
  auto nl = s.find('\n');
  if (nl == std::string::npos) return false;
  try {
    *culprit = std::stoi(s.substr(0, nl));
  } catch (const std::exception&) {
    return false;
  }
  *what = s.substr(nl + 1);
  return true;
}

WorldShape shape_of(const Mesh& mesh) {
  std::vector<int> per_host(static_cast<size_t>(mesh.hosts()), 0);
  for (int r = 0; r < mesh.size(); ++r) ++per_host[static_cast<size_t>(mesh.host_of(r))];
  return WorldShape{.size = mesh.size(),
                    .hosts = mesh.hosts(),
                    .max_local = *std::max_element(per_host.begin(), per_host.end()),
                    .shared_memory = mesh.shared_memory_everywhere(),
                    .ranks_per_cpu = mesh.ranks_per_cpu()};
}

}  // namespace

void check_buffer(const char* op, const Buffer& b) {
  if (b.count > 0 && b.data == nullptr) {
    throw ConfigError(std::string(op) + ": buffer of " + std::to_string(b.count) +
                      " elements has a null data pointer");
  }
}

std::unique_ptr<Communicator> Communicator::create(store::Store& store, const CommConfig& config) {
  // spdlog builds its registry on first use inside the (uninstrumented) shared library; doing that
  // once under call_once gives ThreadSanitizer the ordering it cannot see there, so ranks created
  // on several threads of one process do not report a false race on the logger.
  static std::once_flag logger_once;
  std::call_once(logger_once, [] { spdlog::default_logger_raw(); });
  if (config.chunk_bytes == 0) throw ConfigError("communicator: chunk_bytes must be positive");
  std::unique_ptr<Mesh> mesh = Mesh::connect(store, config);
  return std::make_unique<TcpCommunicator>(store, config, std::move(mesh));
}

// Works outlive their communicator; the Runner they share forgets it when it is destroyed.
class TcpCommunicator::Runner final : public WorkRunner {
 public:
  explicit Runner(TcpCommunicator* comm) : comm_(comm) {}
  void run_until(const Work& work, std::chrono::milliseconds limit) override {
    // Another waiting thread is running an operation: wait like anyone else (a wait with a
    // timeout must not queue behind it).
    std::unique_lock lk(mu_, std::try_to_lock);
    if (lk.owns_lock() && comm_) comm_->run_until(work, limit);
  }
  void detach() {
    std::lock_guard lk(mu_);
    comm_ = nullptr;
  }

 private:
  std::mutex mu_;
  TcpCommunicator* comm_;
};

TcpCommunicator::TcpCommunicator(store::Store& store, const CommConfig& config,
                                 std::unique_ptr<Mesh> mesh)
    : store_(store),
      config_(config),
      mesh_(std::move(mesh)),
      recorder_(config.flight_recorder ? config.flight_recorder
                                       : std::make_shared<FlightRecorder>(
                                             config.rank, config.flight_recorder_entries)),
      runner_(std::make_shared<Runner>(this)),
      hand_off_delay_(config.hand_off_delay),
      hand_off_delay_max_(std::max(config.hand_off_delay, config.hand_off_delay_max)),
      spin_(mesh_->size() > 1 && mesh_->ranks_on_this_host() <= usable_cpus(config)
                ? config.spin_wait
                : Clock::duration{}),
      shape_(shape_of(*mesh_)) {
  recorder_->restart();
  thread_ = std::thread([this] { loop(); });
}

TcpCommunicator::~TcpCommunicator() {
  bool busy;
  {
    std::lock_guard lk(mu_);
    busy = in_flight_ || !queue_.empty();
  }
  if (busy) abort("communicator destroyed");
  runner_->detach();  // waits for an operation running on a waiting thread (aborted if busy)
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  alarm_.ring();
  thread_.join();
}

std::string TcpCommunicator::what_of(const Op& op) const {
  if (op.id.kind == OpKind::PointToPoint) return op.work->name();
  return describe(op.id.kind, op.id.seq);
}

std::shared_ptr<Work> TcpCommunicator::enqueue(OpKind kind, DType dtype, size_t bytes,
                                               std::chrono::milliseconds timeout,
                                               std::function<void(OpContext&)> body, uint32_t tag,
                                               int peer, const std::string& p2p_name,
                                               const Op* shape) {
  Op op;
  if (shape) {
    op.count = shape->count;
    op.algorithm = shape->algorithm;
    op.detail = shape->detail;
    op.message = shape->message;
    op.sends = shape->sends;
    op.prompt = shape->prompt;
  }
  op.id = OpId{.kind = kind,
               .seq = 0,
               .dtype = dtype,
               .tag = tag,
               .skip_empty = kind != OpKind::PointToPoint};
  op.peer = peer;
  op.timeout = timeout.count() > 0 ? timeout : config_.timeout;
  op.body = std::move(body);
  const bool deferred =
      !op.prompt && bytes <= config_.hand_off_bytes && config_.hand_off_delay.count() > 0;
  // A large operation does not spin on TCP, where the kernel moves its bytes and a spinning
  // thread would only take a CPU from the caller's computation; on shared memory its peer moves
  // them, and a wait that sleeps costs a doorbell and a wake-up per ring's worth of data. That
  // wait lasts as long as the peer takes to write a segment (256 KiB: longer than spin_wait on
  // some machines, where every wait of a short spin ended in a sleep and 2-rank busbw fell to a
  // third), so it polls for up to yield_wait, yielding the CPU between polls to whatever else
  // this rank runs (backward's computation) before it sleeps.
  const bool small = bytes <= config_.hand_off_bytes;
  op.spin = small
                ? Spin{.tcp = spin_, .shm = spin_}
                : Spin{.shm = std::max<Clock::duration>(spin_, config_.yield_wait), .yield = true};
  // Oversubscribed: waits poll and yield the CPU in turn, so that the rank they wait for gets to
  // run: on shared memory it must copy the data itself; over TCP a small operation's peer is as
  // likely to be one of this host's ranks waiting for a CPU to write its reply.
  if (spin_.count() == 0) {
    op.spin = Spin{.tcp = small ? config_.yield_wait : std::chrono::nanoseconds{0},
                   .shm = config_.yield_wait,
                   .yield = true};
  }
  std::exception_ptr fatal;
  std::shared_ptr<Work> work;
  bool wake = false;
  {
    std::lock_guard lk(mu_);
    // One clock read for the record's queued time, the hand-off time and the alarm, under the
    // lock: the alarm's time set earlier must be compared with the present (Alarm::set_by).
    const Clock::time_point now = Clock::now();
    if (kind == OpKind::PointToPoint) {
      op.work = std::make_shared<Work>(p2p_name, next_p2p_, runner_);
      recorder_->on_message_posted(MessageRecord{.id = next_p2p_++,
                                                 .sends = op.sends,
                                                 .peer = peer,
                                                 .tag = op.message.tag,
                                                 .dtype = dtype,
                                                 .count = op.message.buf.count},
                                   op.work);
    } else {
      op.id.seq = next_seq_++;
      op.work = std::make_shared<Work>(std::string(op_kind_name(kind)), op.id.seq, runner_);
      recorder_->on_queued(CollectiveRecord{.seq = op.id.seq,
                                            .kind = kind,
                                            .dtype = dtype,
                                            .count = op.count,
                                            .algorithm = op.algorithm},
                           now);
    }
    work = op.work;
    fatal = fatal_;
    if (!fatal) {
      // An operation the communication thread must start at once does not wait behind small
      // ones that are waiting for their callers.
      if (!deferred) {
        for (Op& q : queue_) q.hand_off_at = {};
      }
      const bool first = queue_.empty() && !in_flight_;
      const Clock::time_point at = deferred ? now + hand_off_delay_ : Clock::time_point{};
      op.hand_off_at = at;
      queue_.push_back(std::move(op));
      if (sleeping_) {
        if (!deferred) {
          wake = true;
        } else if (first) {
          // Otherwise the thread already has an earlier time set, or is woken when the
          // operation in flight on a waiting thread ends (run_until).
          alarm_.set_by(at, now);
        }
      }
    }
  }
  if (fatal) {
    if (kind != OpKind::PointToPoint) recorder_->on_finished(op.id.seq, false);
    work->fail(fatal);
    return work;
  }
  if (wake) alarm_.ring();
  return work;
}

std::shared_ptr<Work> TcpCommunicator::allreduce(Buffer buf, const AllreduceOptions& opts) {
  check_buffer("allreduce", buf);
  check_reduction(buf.dtype, opts.op, "allreduce");
  Algorithm algo = opts.algorithm;
  if (algo == Algorithm::Auto) {
    algo = choose_allreduce(buf.bytes(), shape_);
  }
  const ReduceOp op = opts.op;
  Op shape;
  shape.count = buf.count;
  shape.algorithm = algo;
  shape.detail = static_cast<int>(op);
  shape.prompt = opts.prompt;
  return enqueue(
      OpKind::Allreduce, buf.dtype, buf.bytes(), opts.timeout,
      [buf, algo, op](OpContext& ctx) { allreduce_with(ctx, buf, op, algo); }, 0, -1, "", &shape);
}

// reduce_scatter and allgather: `whole` holds size() blocks of `block`'s shape and type.
static void check_block_shapes(const char* op, const char* rule, Buffer whole, Buffer block,
                               int size) {
  if (whole.dtype == block.dtype && whole.count == block.count * static_cast<size_t>(size)) return;
  auto shape = [](Buffer b) {
    return std::to_string(b.count) + " " + std::string(dtype_name(b.dtype));
  };
  throw ConfigError(std::string(op) + ": " + rule + " (whole: " + shape(whole) +
                    ", block: " + shape(block) + ", size " + std::to_string(size) + ")");
}

std::shared_ptr<Work> TcpCommunicator::reduce_scatter(Buffer in, Buffer out,
                                                      const ReduceScatterOptions& opts) {
  check_buffer("reduce_scatter", in);
  check_buffer("reduce_scatter", out);
  check_block_shapes("reduce_scatter", "in must hold size() * out.count elements of out's type",
                     /*whole=*/in, /*block=*/out, size());
  check_reduction(in.dtype, opts.op, "reduce_scatter");
  const ReduceOp op = opts.op;
  Op shape;
  shape.count = in.count;
  shape.algorithm = Algorithm::Ring;
  shape.detail = static_cast<int>(op);
  return enqueue(
      OpKind::ReduceScatter, in.dtype, in.bytes(), opts.timeout,
      [in, out, op](OpContext& ctx) { reduce_scatter_ring(ctx, in, out, op); }, 0, -1, "", &shape);
}

std::shared_ptr<Work> TcpCommunicator::allgather(Buffer in, Buffer out,
                                                 const CollectiveOptions& opts) {
  check_buffer("allgather", in);
  check_buffer("allgather", out);
  check_block_shapes("allgather", "out must hold size() * in.count elements of in's type",
                     /*whole=*/out, /*block=*/in, size());
  Op shape;
  shape.count = out.count;
  shape.algorithm = Algorithm::Ring;
  return enqueue(
      OpKind::Allgather, in.dtype, out.bytes(), opts.timeout,
      [in, out](OpContext& ctx) { allgather_ring(ctx, in, out); }, 0, -1, "", &shape);
}

std::shared_ptr<Work> TcpCommunicator::allreduce_encoded(Buffer buf, Encoding& encoding,
                                                         const EncodedAllreduceOptions& opts) {
  check_buffer("allreduce_encoded", buf);
  check_buffer("allreduce_encoded", opts.residual);
  if (buf.dtype != DType::F32) {
    throw ConfigError("allreduce_encoded: the buffer must be f32, got " +
                      std::string(dtype_name(buf.dtype)));
  }
  if (opts.op != ReduceOp::Sum && opts.op != ReduceOp::Avg) {
    throw ConfigError("allreduce_encoded: only sum and avg, got " +
                      std::string(reduce_op_name(opts.op)));
  }
  const Buffer residual = opts.residual;
  if (residual.data != nullptr && (residual.dtype != DType::F32 || residual.count != buf.count)) {
    throw ConfigError("allreduce_encoded: the residual must be f32 of the buffer's " +
                      std::to_string(buf.count) + " elements, got " +
                      std::to_string(residual.count) + " " +
                      std::string(dtype_name(residual.dtype)));
  }
  if (encoding.wire_tag() == 0) throw ConfigError("allreduce_encoded: wire_tag() must be nonzero");
  const ReduceOp op = opts.op;
  Encoding* enc = &encoding;
  return enqueue(
      OpKind::AllreduceEncoded, buf.dtype, buf.bytes(), opts.timeout,
      [buf, enc, op, residual](OpContext& ctx) {
        comm::allreduce_encoded(ctx, buf, *enc, op, residual);
      },
      encoding.wire_tag());
}

std::shared_ptr<Work> TcpCommunicator::allgatherv(Buffer in, GatheredBlocks* out,
                                                  const CollectiveOptions& opts) {
  check_buffer("allgatherv", in);
  if (out == nullptr) throw ConfigError("allgatherv: out is null");
  // The gathered size is not known before the operation runs: it is never deferred.
  return enqueue(OpKind::Allgatherv, in.dtype, std::numeric_limits<size_t>::max(), opts.timeout,
                 [in, out](OpContext& ctx) { allgatherv_ring(ctx, in, out); });
}

std::shared_ptr<Work> TcpCommunicator::broadcast(Buffer buf, const BroadcastOptions& opts) {
  check_buffer("broadcast", buf);
  if (opts.root < 0 || opts.root >= size()) {
    throw ConfigError("broadcast: root " + std::to_string(opts.root) +
                      " is not a rank of a world of " + std::to_string(size()));
  }
  const int root = opts.root;
  Op shape;
  shape.count = buf.count;
  shape.detail = root;
  return enqueue(
      OpKind::Broadcast, buf.dtype, buf.bytes(), opts.timeout,
      [buf, root](OpContext& ctx) { comm::broadcast(ctx, buf, root); }, 0, -1, "", &shape);
}

std::shared_ptr<Work> TcpCommunicator::barrier(const CollectiveOptions& opts) {
  return enqueue(OpKind::Barrier, DType::I64, 0, opts.timeout,
                 [](OpContext& ctx) { comm::barrier(ctx); });
}

std::shared_ptr<Work> TcpCommunicator::send(Buffer buf, int dst, const PointToPointOptions& opts) {
  check_buffer("send", buf);
  if (dst < 0 || dst >= size() || dst == rank()) {
    throw ConfigError("send: rank " + std::to_string(rank()) + " cannot send to rank " +
                      std::to_string(dst) + " in a world of " + std::to_string(size()));
  }
  Op message;
  message.message = Message{.buf = buf, .peer = dst, .tag = opts.tag};
  message.sends = true;
  return enqueue(OpKind::PointToPoint, buf.dtype, buf.bytes(), opts.timeout, nullptr, opts.tag, dst,
                 "send to rank " + std::to_string(dst) + " (tag " + std::to_string(opts.tag) + ")",
                 &message);
}

std::shared_ptr<Work> TcpCommunicator::recv(Buffer buf, int src, const PointToPointOptions& opts) {
  check_buffer("recv", buf);
  if (src < 0 || src >= size() || src == rank()) {
    throw ConfigError("recv: rank " + std::to_string(rank()) + " cannot receive from rank " +
                      std::to_string(src) + " in a world of " + std::to_string(size()));
  }
  Op message;
  message.message = Message{.buf = buf, .peer = src, .tag = opts.tag};
  return enqueue(
      OpKind::PointToPoint, buf.dtype, buf.bytes(), opts.timeout, nullptr, opts.tag, src,
      "recv from rank " + std::to_string(src) + " (tag " + std::to_string(opts.tag) + ")",
      &message);
}

std::exception_ptr TcpCommunicator::failure() const {
  std::lock_guard lk(mu_);
  return fatal_;
}

void TcpCommunicator::abort(const std::string& reason) {
  std::deque<Op> pending;
  {
    std::lock_guard lk(mu_);
    if (aborted_) return;
    aborted_ = true;
    abort_reason_ = reason;
    if (!fatal_) {
      fatal_ = std::make_exception_ptr(
          AbortedError("communicator of rank " + std::to_string(rank()) + " aborted: " + reason));
    }
    pending.swap(queue_);
  }
  // Wakes the communication thread if it is blocked on a socket; it then fails its operation.
  mesh_->shutdown_all();
  for (auto& op : pending) {
    if (op.id.kind != OpKind::PointToPoint) recorder_->on_finished(op.id.seq, false);
    op.work->fail(std::make_exception_ptr(AbortedError(what_of(op) + " aborted: " + reason)));
  }
  alarm_.ring();
}

CommStats TcpCommunicator::stats() const {
  return CommStats{.bytes_sent = counters_.sent.load(std::memory_order_relaxed),
                   .bytes_received = counters_.received.load(std::memory_order_relaxed),
                   .collectives = collectives_.load(std::memory_order_relaxed),
                   .shm_pairs = mesh_->pairs_of(transport::Kind::Shm),
                   .tcp_pairs = mesh_->pairs_of(transport::Kind::Tcp)};
}

void TcpCommunicator::loop() {
  for (;;) {
    Op op;
    std::exception_ptr fatal;
    {
      std::unique_lock lk(mu_);
      for (;;) {
        if (queue_.empty() && stop_) return;
        // An operation may be in flight on a waiting thread (run_until); the next one waits for
        // it. A small one is left to its waiting thread until its hand-off time.
        if (!queue_.empty() && !in_flight_) {
          const Clock::time_point at = queue_.front().hand_off_at;
          if (stop_ || at <= Clock::now()) break;
          alarm_.set_by(at);
        }
        sleeping_ = true;
        lk.unlock();
        alarm_.sleep();
        lk.lock();
        sleeping_ = false;
        // Woken for operations that their callers ran in the meantime: they wait at once, so
        // this thread need not come back as soon.
        if (queue_.empty() && !stop_) {
          hand_off_delay_ = std::min<Clock::duration>(2 * hand_off_delay_, hand_off_delay_max_);
        }
      }
      // Taken after its hand-off time: its caller does not wait at once.
      if (queue_.front().hand_off_at != Clock::time_point{}) {
        hand_off_delay_ = config_.hand_off_delay;
      }
      op = std::move(queue_.front());
      queue_.pop_front();
      in_flight_ = true;
      fatal = fatal_;
    }
    execute(op, fatal);
    std::lock_guard lk(mu_);
    in_flight_ = false;
  }
}

void TcpCommunicator::run_until(const Work& work, std::chrono::milliseconds limit) {
  for (;;) {
    Op op;
    std::exception_ptr fatal;
    {
      std::lock_guard lk(mu_);
      auto it = std::find_if(queue_.begin(), queue_.end(),
                             [&](const Op& o) { return o.work.get() == &work; });
      if (in_flight_ || it == queue_.end()) return;
      if (limit != Millis::max()) {
        // Only `work` alone, and only if its own deadline ends the wait first.
        if (it != queue_.begin() || it->timeout > limit - kDiagnosisBound) return;
      }
      op = std::move(queue_.front());
      queue_.pop_front();
      in_flight_ = true;
      fatal = fatal_;
    }
    execute(op, fatal);
    bool more;
    {
      std::lock_guard lk(mu_);
      in_flight_ = false;
      more = !queue_.empty() && sleeping_;
    }
    if (more) alarm_.ring();  // the communication thread may be waiting for in_flight_ to clear
    if (op.work.get() == &work) return;
  }
}

void TcpCommunicator::execute(Op& op, const std::exception_ptr& fatal) {
  const bool collective = op.id.kind != OpKind::PointToPoint;
  if (fatal) {
    if (collective) recorder_->on_finished(op.id.seq, false);
    op.work->fail(fatal);
    return;
  }
  if (!collective) {
    execute_message(op);
    return;
  }
  const Clock::time_point started = Clock::now();
  recorder_->on_started(op.id.seq, op.algorithm, started);
  OpTiming timing;
  timing.time_reductions = op.count * dtype_size(op.id.dtype) >= OpTiming::kTimedBytes;
  t_op_timing = &timing;
  const uint64_t sent_before = counters_.sent.load(std::memory_order_relaxed);
  auto sent = [&] { return counters_.sent.load(std::memory_order_relaxed) - sent_before; };
  OpContext ctx = context(op, Deadline(started + op.timeout));
  try {
    if (config_.check_collectives && mesh_->size() > 1) check_fingerprint(ctx, op);
    op.body(ctx);
  } catch (...) {
    t_op_timing = nullptr;
    recorder_->on_finished(op.id.seq, false, &timing, sent());
    op.work->fail(fail(op, std::current_exception()));
    return;
  }
  t_op_timing = nullptr;
  recorder_->on_finished(op.id.seq, true, &timing, sent());
  collectives_.fetch_add(1, std::memory_order_relaxed);
  op.work->finish();
}

OpContext TcpCommunicator::context(const Op& op, Deadline deadline) {
  return OpContext{.mesh = *mesh_,
                   .counters = counters_,
                   .id = op.id,
                   .deadline = deadline,
                   .chunk_bytes = config_.chunk_bytes,
                   .scratch = scratch_,
                   .ring_window = config_.ring_window,
                   .spin = op.spin,
                   .fold_bytes = config_.shm_fold_bytes};
}

std::exception_ptr TcpCommunicator::fail(const Op& op, std::exception_ptr raw) {
  std::exception_ptr err;
  int culprit = rank();
  bool aborted;
  std::string reason;
  {
    std::lock_guard lk(mu_);
    aborted = aborted_;
    reason = abort_reason_;
  }
  if (aborted) {
    err = std::make_exception_ptr(AbortedError(what_of(op) + " aborted: " + reason));
  } else {
    try {
      std::rethrow_exception(raw);
    } catch (const StallError& e) {
      err = timed_out(op, e);
    } catch (const PeerLostError& e) {
      err = peer_lost(op, e);
    } catch (const CollectiveMismatchError&) {
      err = raw;  // already names both ranks and both collectives
    } catch (const IntegrityError& e) {
      err = std::make_exception_ptr(IntegrityError(what_of(op) + " failed on rank " +
                                                   std::to_string(rank()) + ": " + e.what()));
    } catch (const ProtocolError& e) {
      err = std::make_exception_ptr(ProtocolError(what_of(op) + " failed on rank " +
                                                  std::to_string(rank()) + ": " + e.what()));
    } catch (...) {
      err = raw;
    }
    try {
      std::rethrow_exception(err);
    } catch (const PeerLostError& e) {
      culprit = e.rank();
    } catch (const CollectiveTimeoutError& e) {
      if (!e.missing_ranks().empty()) culprit = e.missing_ranks().front();
    } catch (...) {
    }
  }

  std::string what;
  try {
    std::rethrow_exception(err);
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
    what = "unknown error";
  }
  spdlog::error("rank {}: {}", rank(), what);

  std::deque<Op> pending;
  {
    std::lock_guard lk(mu_);
    if (!fatal_) fatal_ = err;
    pending.swap(queue_);
  }
  // Tell the others before cutting the connections, so that a rank that sees the connection drop
  // can already read who failed first.
  if (!aborted && mesh_->size() > 1) {
    try {
      store_.set(key("failed/" + std::to_string(rank())),
                 store::to_bytes(encode_record(culprit, what)));
    } catch (const std::exception& e) {
      spdlog::warn("rank {}: could not record the failure in the store: {}", rank(), e.what());
    }
  }
  mesh_->shutdown_all();
  for (auto& p : pending) {
    if (p.id.kind != OpKind::PointToPoint) recorder_->on_finished(p.id.seq, false);
    p.work->fail(err);
  }
  return err;
}

std::exception_ptr TcpCommunicator::timed_out(const Op& op, const StallError& stall) {
  const std::string what = what_of(op);
  const std::string head = what + " timed out after " + std::to_string(op.timeout.count()) +
                           " ms on rank " + std::to_string(rank()) + " (" + stall.waiting_for() +
                           ")";
  std::vector<int> missing;
  const auto grace = std::min<Millis>(Millis(2000), op.timeout / 4);
  if (op.id.kind != OpKind::PointToPoint && mesh_->size() > 2) {
    // Every rank that times out in this collective says so in the store. A rank that is stopped,
    // hung or never called the collective cannot, so the ranks missing after a grace period are
    // the real culprits, not the neighbour this rank happened to be waiting on.
    const std::string base = key("stuck/" + std::to_string(op.id.seq) + "/");
    try {
      store_.set(base + std::to_string(rank()), store::to_bytes(stall.waiting_for()));
      std::vector<std::string> others;
      for (int r = 0; r < size(); ++r) {
        if (r != rank()) others.push_back(base + std::to_string(r));
      }
      try {
        store_.wait(others, grace);
      } catch (const TimeoutError&) {
        // A rank stuck one collective behind or ahead is waiting too, not the culprit: data
        // already in flight when a rank stopped can carry some survivors one collective further.
        auto stuck_at = [&](uint64_t seq, int r) {
          return store_.check({key("stuck/" + std::to_string(seq) + "/" + std::to_string(r))});
        };
        for (int r = 0; r < size(); ++r) {
          if (r == rank() || stuck_at(op.id.seq, r) || stuck_at(op.id.seq + 1, r) ||
              (op.id.seq > 1 && stuck_at(op.id.seq - 1, r))) {
            continue;
          }
          missing.push_back(r);
        }
      }
    } catch (const std::exception& e) {
      spdlog::warn("rank {}: store unavailable while diagnosing the timeout of {}: {}", rank(),
                   what, e.what());
      missing.clear();
    }
  }
  std::string msg;
  if (missing.empty()) {
    missing.push_back(stall.peer());
    msg = head + "; not heard from rank " + std::to_string(stall.peer());
  } else {
    msg = head + "; ranks not heard from: " + join(missing) +
          " (they did not report being stuck in this collective within " +
          std::to_string(grace.count()) +
          " ms: stopped, hung, never called it, or called it later than this rank by more than "
          "that)";
  }
  return std::make_exception_ptr(
      CollectiveTimeoutError(std::string(op_kind_name(op.id.kind)), op.id.seq, missing, msg));
}

std::exception_ptr TcpCommunicator::peer_lost(const Op& op, const PeerLostError& lost) {
  const int peer = lost.rank();
  const std::string what = what_of(op);
  if (peer < 0 || peer >= size()) return std::make_exception_ptr(lost);
  // If the peer failed on its own and said why, the culprit is the rank it names. A failing rank
  // writes its record before it cuts its connections (fail()), so the record is there by the time
  // this rank sees them cut, or never will be: waiting for it would only delay every recovery from
  // a killed process.
  const std::string rec_key = key("failed/" + std::to_string(peer));
  try {
    if (!store_.check({rec_key})) throw Error("no failure record");
    int culprit;
    std::string cause;
    if (decode_record(store::to_string(store_.get(rec_key)), &culprit, &cause)) {
      std::string msg = what + " failed on rank " + std::to_string(rank()) + ": rank " +
                        std::to_string(peer) + " closed its connections after ";
      if (culprit == rank()) {
        // The others gave up waiting for this rank (it was late or stuck); the peer is what
        // this rank lost.
        msg += "giving up on this rank";
        culprit = peer;
      } else if (culprit != peer) {
        msg += "a failure of rank " + std::to_string(culprit);
      } else {
        msg += "a failure";
      }
      msg += " (rank " + std::to_string(peer) + " reported: " + cause + ")";
      return std::make_exception_ptr(PeerLostError(culprit, msg));
    }
  } catch (const std::exception&) {
    // No record: the peer died without a word (killed, crashed, or its host went away).
  }
  return std::make_exception_ptr(
      PeerLostError(peer, std::string(lost.what()) + " on rank " + std::to_string(rank()) +
                              "; rank " + std::to_string(peer) +
                              " left without reporting a failure (killed, crashed or destroyed)"));
}

}  // namespace cohort::comm
