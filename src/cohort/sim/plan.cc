#include "cohort/sim/plan.h"

#include <sys/mman.h>

#include <algorithm>

#include "cohort/base/clock.h"
#include "cohort/base/error.h"
#include "cohort/comm/algorithms.h"
#include "cohort/comm/mesh.h"

namespace cohort::sim {
namespace {

// Memory for the buffer every planned rank runs on: address space reserved at once, pages only
// where an algorithm really writes (its own copies of a block; a plan never touches segments).
class Arena {
 public:
  explicit Arena(size_t bytes) : bytes_(std::max<size_t>(bytes, 64)) {
    void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw Error("plan: cannot reserve " + std::to_string(bytes_) + " bytes");
    data_ = static_cast<uint8_t*>(p);
  }
  ~Arena() { munmap(data_, bytes_); }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  uint8_t* data() const { return data_; }

 private:
  size_t bytes_;
  uint8_t* data_;
};

// A format's sizes and tag with none of its arithmetic: what an encoded allreduce is planned with.
class PlannedEncoding final : public comm::Encoding {
 public:
  PlannedEncoding(const comm::Encoding& real, comm::PlanSink& sink) : real_(real), sink_(sink) {}
  uint32_t wire_tag() const override { return real_.wire_tag(); }
  std::string_view name() const override { return real_.name(); }
  size_t granule() const override { return real_.granule(); }
  size_t encoded_bytes(size_t count) const override { return real_.encoded_bytes(count); }
  void encode(const float*, size_t count, uint8_t*) override {
    sink_.work(comm::WorkKind::Encode, count * sizeof(float));
  }
  void decode(const uint8_t*, size_t count, float*) const override {
    sink_.work(comm::WorkKind::Decode, count * sizeof(float));
  }
  void decode_add(const uint8_t*, size_t count, float*) const override {
    sink_.work(comm::WorkKind::Decode, count * sizeof(float));
  }

 private:
  const comm::Encoding& real_;
  comm::PlanSink& sink_;
};

// Appends item i of a stream to its runs.
void append(std::vector<Run>& runs, uint64_t i, uint64_t bytes, uint64_t gate, double work) {
  if (!runs.empty()) {
    Run& last = runs.back();
    if (last.bytes == bytes && last.work_s == work) {
      if (last.gate.at(i) == gate) {
        ++last.count;
        return;
      }
      // A run of one item may read its gate as relative: the second item decides.
      if (last.count == 1 && !last.gate.relative) {
        const Gate rel{.relative = true,
                       .offset = static_cast<int64_t>(gate) - static_cast<int64_t>(i)};
        if (rel.at(i - 1) == last.gate.at(i - 1)) {
          last.gate = rel;
          ++last.count;
          return;
        }
      }
    }
  }
  runs.push_back(Run{.count = 1,
                     .bytes = bytes,
                     .gate = Gate{.relative = false, .offset = static_cast<int64_t>(gate)},
                     .work_s = work});
}

// For i >= lag, the items up to i - lag; none before.
uint64_t lagged(uint64_t i, size_t lag) {
  if (lag == comm::kNoLag) return 0;
  return i >= lag ? i - lag + 1 : 0;
}

class Recorder final : public comm::PlanSink {
 public:
  explicit Recorder(const WorkCost& cost) : cost_(cost) {}

  void exchange(const comm::SendPlan* send, const comm::RecvPlan* recv) override {
    Exchange x;
    x.work_before_s = pending_;
    pending_ = 0;
    if (send && send->count) {
      x.send_to = send->peer;
      for (size_t i = 0; i < send->count; ++i) {
        const uint64_t bytes = send->segment(i).bytes;
        const uint64_t gate = send->needs ? send->needs(i) : lagged(i, send->lag);
        append(x.send, i, bytes, gate, 0);
        plan_.bytes_sent += bytes;
      }
    }
    if (recv && recv->count) {
      x.recv_from = recv->peer;
      for (size_t i = 0; i < recv->count; ++i) {
        const comm::Segment seg = recv->segment(i);
        const uint64_t bytes = seg.bytes;
        const uint64_t gate = std::max(lagged(i, recv->lag), lagged(i, recv->apply_lag));
        item_work_ = 0;
        in_item_ = true;
        if (seg.fold && recv->fold) recv->fold(i, 0, seg.data, seg.bytes);
        if (recv->on_segment) recv->on_segment(i);
        in_item_ = false;
        append(x.recv, i, bytes, gate, item_work_);
      }
    }
    if (x.send_to < 0 && x.recv_from < 0) {
      pending_ += x.work_before_s;
      return;
    }
    plan_.exchanges.push_back(std::move(x));
  }

  void work(comm::WorkKind kind, size_t bytes) override {
    const double s = cost_(kind, bytes);
    (in_item_ ? item_work_ : pending_) += s;
  }

  RankPlan take() {
    plan_.work_after_s = pending_;
    pending_ = 0;
    return std::move(plan_);
  }

 private:
  const WorkCost& cost_;
  RankPlan plan_;
  double pending_ = 0;
  double item_work_ = 0;
  bool in_item_ = false;
};

int max_local(const std::vector<int>& host_of) {
  std::vector<int> per(host_of.size(), 0);
  int most = 0;
  for (int h : host_of) most = std::max(most, ++per[static_cast<size_t>(h)]);
  return most;
}

int host_count(const std::vector<int>& host_of) {
  int hosts = 0;
  for (int h : host_of) hosts = std::max(hosts, h + 1);
  return hosts;
}

}  // namespace

comm::Algorithm resolve_algorithm(comm::Algorithm algorithm, size_t bytes,
                                  const std::vector<int>& host_of, bool shared_memory, int cores) {
  if (algorithm != comm::Algorithm::Auto) return algorithm;
  const int most = max_local(host_of);
  return comm::choose_allreduce(bytes,
                                {.size = static_cast<int>(host_of.size()),
                                 .hosts = host_count(host_of),
                                 .max_local = most,
                                 .shared_memory = shared_memory,
                                 .ranks_per_cpu = cores > 0 ? (most + cores - 1) / cores : 1});
}

std::vector<RankPlan> plan_collective(const CollectiveSpec& spec, const std::vector<int>& host_of,
                                      const WorkCost& cost) {
  const int n = static_cast<int>(host_of.size());
  if (n < 1) throw Error("plan: a world needs at least one rank");
  const size_t es = dtype_size(spec.dtype);
  const bool gather = spec.kind == CollectiveSpec::Kind::Allgatherv;
  Arena arena(spec.count * es * (gather ? static_cast<size_t>(n) : 1));
  std::vector<uint8_t> scratch;
  const comm::Algorithm algo =
      resolve_algorithm(spec.algorithm, spec.count * es, host_of, spec.shared_memory, spec.cores);
  std::vector<RankPlan> plans;
  plans.reserve(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    comm::Mesh mesh(r, host_of);
    comm::Counters counters;
    Recorder recorder(cost);
    comm::OpContext ctx{.mesh = mesh,
                        .counters = counters,
                        .id = {},
                        .deadline = Deadline::never(),
                        .chunk_bytes = spec.chunk_bytes,
                        .scratch = scratch,
                        .ring_window = spec.ring_window,
                        .plan = &recorder};
    const Buffer buf{spec.dtype, arena.data(), spec.count};
    switch (spec.kind) {
      case CollectiveSpec::Kind::Allreduce:
        comm::allreduce_with(ctx, buf, comm::ReduceOp::Avg, algo);
        break;
      case CollectiveSpec::Kind::EncodedAllreduce: {
        if (!spec.encoding) throw Error("plan: an encoded allreduce needs its format");
        PlannedEncoding enc(*spec.encoding, recorder);
        comm::allreduce_encoded(ctx, buf, enc, comm::ReduceOp::Avg, Buffer{});
        break;
      }
      case CollectiveSpec::Kind::Allgatherv: {
        // The counts' ring first (what they are is known here: spec.count everywhere), then
        // the blocks'.
        std::vector<int64_t> seen(static_cast<size_t>(n), static_cast<int64_t>(spec.count));
        comm::OpContext sizes = ctx;
        sizes.id.dtype = DType::I64;
        comm::allgather_ring(sizes, Buffer{DType::I64, &seen[static_cast<size_t>(r)], 1},
                             Buffer{DType::I64, seen.data(), static_cast<size_t>(n)});
        std::vector<size_t> counts(static_cast<size_t>(n), spec.count);
        std::vector<size_t> offsets(static_cast<size_t>(n) + 1, 0);
        for (size_t b = 0; b < counts.size(); ++b) offsets[b + 1] = offsets[b] + counts[b];
        const Buffer in{spec.dtype, arena.data() + static_cast<size_t>(r) * spec.count * es,
                        spec.count};
        comm::allgatherv_blocks(ctx, in, counts, offsets, arena.data());
        break;
      }
    }
    plans.push_back(recorder.take());
  }
  return plans;
}

}  // namespace cohort::sim
