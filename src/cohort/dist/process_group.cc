#include "cohort/dist/process_group.h"

#include <cstdlib>
#include <string_view>

#include "cohort/base/error.h"
#include "cohort/base/secret.h"
#include "cohort/dist/tensors.h"
#include "cohort/dist/work.h"
#include "cohort/net/socket.h"

namespace cohort::dist {

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

bool is_loopback(const std::string& host) {
  return host.empty() || host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

// Keys this group's communicator uses in the store torch.distributed gave it (already prefixed
// per group by new_group).
constexpr const char* kPrefix = "cohort";

std::string agree_on_token(C10dStore& store, int rank, std::string token) {
  const std::string key = std::string(kPrefix) + "/token";
  if (!token.empty()) return token;
  if (rank == 0) {
    token = random_token();
    store.set(key, store::to_bytes(token));
    return token;
  }
  return store::to_string(store.get(key));
}

}  // namespace

GroupSettings settings_from_environment() {
  GroupSettings s;
  s.token = env("COHORT_TOKEN");
  const std::string master = env("MASTER_ADDR");
  s.bind_host = env("COHORT_BIND_HOST");
  s.advertise_host = env("COHORT_ADVERTISE_HOST");
  if (s.bind_host.empty()) s.bind_host = is_loopback(master) ? "127.0.0.1" : "0.0.0.0";
  if (s.advertise_host.empty() && s.bind_host == "0.0.0.0") {
    try {
      s.advertise_host = net::local_address_towards(master);
    } catch (const Error& e) {
      throw ConfigError("cohort backend: cannot tell which address peers reach this host at (" +
                        std::string(e.what()) + "); set COHORT_ADVERTISE_HOST");
    }
  }
  try {
    if (auto t = env("COHORT_TRANSPORT"); !t.empty()) s.transport = comm::parse_transport(t);
    if (auto i = env("COHORT_INTEGRITY"); !i.empty()) s.integrity = comm::parse_integrity(i);
    if (auto a = env("COHORT_ALGORITHM"); !a.empty()) s.algorithm = comm::parse_algorithm(a);
  } catch (const ConfigError& e) {
    throw ConfigError(std::string("cohort backend: ") + e.what());
  }
  const std::string check = env("COHORT_CHECK_COLLECTIVES");
  if (!check.empty() && check != "0" && check != "1") {
    throw ConfigError("cohort backend: COHORT_CHECK_COLLECTIVES='" + check + "' is not 0 or 1");
  }
  s.check_collectives = check == "1";
  return s;
}

ProcessGroupCohort::ProcessGroupCohort(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                       int size, std::chrono::milliseconds timeout,
                                       GroupSettings settings)
    : c10d::ProcessGroup(rank, size), store_(store), settings_(std::move(settings)) {
  store_.set_timeout(timeout);
  auto recorder = std::make_shared<comm::FlightRecorder>(rank, 256);
  comm::CommConfig config{
      .rank = rank,
      .size = size,
      .token = agree_on_token(store_, rank, settings_.token),
      .bind_host = settings_.bind_host,
      .advertise_host = settings_.advertise_host,
      .timeout = timeout,
      .store_prefix = kPrefix,
      .flight_recorder = recorder,
      .check_collectives = settings_.check_collectives,
      .transport = settings_.transport,
      .integrity = settings_.integrity,
  };
  comm_ = comm::Communicator::create(store_, config);
  hangs_ = std::make_shared<HangReports>(store, rank, size, recorder);
}

ProcessGroupCohort::ProcessGroupCohort(const c10::intrusive_ptr<c10d::Store>& store,
                                       std::shared_ptr<comm::Communicator> comm,
                                       GroupSettings settings)
    : c10d::ProcessGroup(comm->rank(), comm->size()),
      store_(store),
      settings_(std::move(settings)),
      comm_(std::move(comm)) {}

ProcessGroupCohort::~ProcessGroupCohort() {
  // The communicator's thread ends first; what its operations let go of is dropped here, on the
  // destroying thread (work.h: defer_release).
  hangs_.reset();
  comm_.reset();
  release_deferred();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::wrap(c10d::OpType type,
                                                        std::shared_ptr<comm::Work> work,
                                                        std::vector<at::Tensor> outputs,
                                                        std::vector<at::Tensor> keep,
                                                        std::function<void()> finish) {
  release_deferred();
  return c10::make_intrusive<CohortWork>(getRank(), type, std::move(work), std::move(outputs),
                                         std::move(keep), std::move(finish), hangs_,
                                         settings_.exchange_clock);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::broadcast(std::vector<at::Tensor>& tensors,
                                                             const c10d::BroadcastOptions& opts) {
  const char* op = "broadcast";
  const at::Tensor& t = single(tensors, op);
  if (opts.rootTensor != 0) throw ConfigError("cohort backend: broadcast: rootTensor must be 0");
  if (opts.rootRank < 0 || opts.rootRank >= getSize()) {
    throw ConfigError("cohort backend: broadcast: root " + std::to_string(opts.rootRank) +
                      " is not a rank of this group of " + std::to_string(getSize()));
  }
  auto work = comm_->broadcast(buffer_of(t, op), {.root = static_cast<int>(opts.rootRank),
                                                  .timeout = timeout_of(opts.timeout)});
  return wrap(c10d::OpType::BROADCAST, std::move(work), tensors);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::allreduce(std::vector<at::Tensor>& tensors,
                                                             const c10d::AllreduceOptions& opts) {
  const char* op = "allreduce";
  const Buffer buf = buffer_of(single(tensors, op), op);
  auto work = comm_->allreduce(buf, {.op = reduce_op_of(opts.reduceOp, buf.dtype, op),
                                     .algorithm = settings_.algorithm,
                                     .timeout = timeout_of(opts.timeout)});
  return wrap(c10d::OpType::ALLREDUCE, std::move(work), tensors);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  const char* op = "allreduce_coalesced";
  if (tensors.empty()) throw ConfigError("cohort backend: allreduce_coalesced: no tensors");
  for (const at::Tensor& t : tensors) {
    buffer_of(t, op);
    if (t.scalar_type() != tensors[0].scalar_type()) {
      throw ConfigError(
          "cohort backend: allreduce_coalesced: tensors of one call must share "
          "their element type");
    }
  }
  at::Tensor flat = flat_cat(tensors);
  const Buffer buf = buffer_of(flat, op);
  auto work = comm_->allreduce(buf, {.op = reduce_op_of(opts.reduceOp, buf.dtype, op),
                                     .algorithm = settings_.algorithm,
                                     .timeout = timeout_of(opts.timeout)});
  std::vector<at::Tensor> outputs = tensors;
  return wrap(c10d::OpType::ALLREDUCE_COALESCED, std::move(work), tensors, {flat},
              [outputs, flat] { copy_out(flat, outputs); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const char* op = "allgather";
  const at::Tensor& in = single(inputs, op);
  if (outputs.size() != 1 || outputs[0].size() != static_cast<size_t>(getSize())) {
    throw ConfigError("cohort backend: allgather: the output list must hold one tensor per rank (" +
                      std::to_string(getSize()) + ")");
  }
  std::vector<at::Tensor>& list = outputs[0];
  check_alike(list, in, op);
  const Buffer in_buf = buffer_of(in, op);
  at::Tensor flat = at::empty({getSize() * in.numel()}, in.options());
  auto work = comm_->allgather(in_buf, buffer_of(flat, op), {.timeout = timeout_of(opts.timeout)});
  return wrap(c10d::OpType::ALLGATHER, std::move(work), list, {in, flat}, [list, flat] {
    for (size_t r = 0; r < list.size(); ++r) {
      const int64_t n = list[r].numel();
      list[r].copy_(flat.narrow(0, static_cast<int64_t>(r) * n, n).view(list[r].sizes()));
    }
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  const char* op = "_allgather_base";
  const Buffer in = buffer_of(input, op), out = buffer_of(output, op);
  if (in.dtype != out.dtype || out.count != in.count * static_cast<size_t>(getSize())) {
    throw ConfigError(
        "cohort backend: all_gather_into_tensor: the output must be the input's type "
        "with world size (" +
        std::to_string(getSize()) + ") times its elements");
  }
  auto work = comm_->allgather(in, out, {.timeout = timeout_of(opts.timeout)});
  return wrap(c10d::OpType::_ALLGATHER_BASE, std::move(work), {output}, {input});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter";
  const at::Tensor& out = single(outputs, op);
  if (inputs.size() != 1 || inputs[0].size() != static_cast<size_t>(getSize())) {
    throw ConfigError(
        "cohort backend: reduce_scatter: the input list must hold one tensor per "
        "rank (" +
        std::to_string(getSize()) + ")");
  }
  check_alike(inputs[0], out, op);
  const Buffer out_buf = buffer_of(out, op);
  at::Tensor flat = flat_cat(inputs[0]);
  auto work = comm_->reduce_scatter(
      buffer_of(flat, op), out_buf,
      {.op = reduce_op_of(opts.reduceOp, out_buf.dtype, op), .timeout = timeout_of(opts.timeout)});
  return wrap(c10d::OpType::REDUCE_SCATTER, std::move(work), outputs, {flat});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  const char* op = "_reduce_scatter_base";
  const Buffer in = buffer_of(input, op), out = buffer_of(output, op);
  if (in.dtype != out.dtype || in.count != out.count * static_cast<size_t>(getSize())) {
    throw ConfigError(
        "cohort backend: reduce_scatter_tensor: the input must be the output's type "
        "with world size (" +
        std::to_string(getSize()) + ") times its elements");
  }
  auto work = comm_->reduce_scatter(
      in, out,
      {.op = reduce_op_of(opts.reduceOp, out.dtype, op), .timeout = timeout_of(opts.timeout)});
  return wrap(c10d::OpType::_REDUCE_SCATTER_BASE, std::move(work), {output}, {input});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::barrier(const c10d::BarrierOptions& opts) {
  auto work = comm_->barrier({.timeout = timeout_of(opts.timeout)});
  return wrap(c10d::OpType::BARRIER, std::move(work), {});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::send(std::vector<at::Tensor>& tensors, int dst,
                                                        int tag) {
  const char* op = "send";
  if (tag < 0) throw ConfigError("cohort backend: send: tag " + std::to_string(tag) + " < 0");
  auto work =
      comm_->send(buffer_of(single(tensors, op), op), dst, {.tag = static_cast<uint32_t>(tag)});
  return wrap(c10d::OpType::SEND, std::move(work), tensors);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::recv(std::vector<at::Tensor>& tensors, int src,
                                                        int tag) {
  const char* op = "recv";
  if (tag < 0) throw ConfigError("cohort backend: recv: tag " + std::to_string(tag) + " < 0");
  auto work =
      comm_->recv(buffer_of(single(tensors, op), op), src, {.tag = static_cast<uint32_t>(tag)});
  return wrap(c10d::OpType::RECV, std::move(work), tensors);
}

}  // namespace cohort::dist
