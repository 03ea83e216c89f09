// The torch.distributed backend "cohort": a c10d::ProcessGroup whose collectives run on a Cohort
// communicator. init_process_group("cohort") and new_group() build one from the store
// torch.distributed made (so env://, tcp:// and file:// rendezvous all work), the group's rank and
// size, and its timeout, which becomes every collective's deadline.
//
// What Cohort's environment variables set (docs/python.md):
//   COHORT_TOKEN            the job's secret (`cohort run` sets it); without it rank 0 makes one
//                           and hands it out through the store (as safe as the store is)
//   COHORT_BIND_HOST        where this rank listens (default: 127.0.0.1 when MASTER_ADDR is
//                           loopback or unset, every interface otherwise)
//   COHORT_ADVERTISE_HOST   what peers dial (default: the interface that routes to MASTER_ADDR)
//   COHORT_TRANSPORT        auto | tcp | shm (comm.transport)
//   COHORT_INTEGRITY        none | hmac | gmac (comm.integrity)
//   COHORT_ALGORITHM        the allreduce algorithm (comm.algorithm)
//   COHORT_CHECK_COLLECTIVES=1  ranks compare every collective before it runs (debug)
#pragma once

#include <memory>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "cohort/comm/communicator.h"
#include "cohort/dist/c10d_store.h"
#include "cohort/dist/hang_reports.h"
#include "cohort/trace/exchange_clock.h"

namespace cohort::dist {

// Settings of a group beyond what torch.distributed passes (read from the environment by
// config_from_environment, or set by a caller that builds a group itself).
struct GroupSettings {
  std::string token;
  std::string bind_host;
  std::string advertise_host;
  comm::Transport transport = comm::Transport::Auto;
  comm::Integrity integrity = comm::Integrity::None;
  comm::Algorithm algorithm = comm::Algorithm::Auto;
  bool check_collectives = false;
  // Told how long the caller was blocked on each operation (trace/exchange_clock.h): the job's
  // step log for a Python worker of a Cohort job; null: nobody asks.
  std::shared_ptr<trace::ExchangeClock> exchange_clock;
};

// ConfigError naming the variable for a malformed one.
GroupSettings settings_from_environment();

class ProcessGroupCohort final : public c10d::ProcessGroup {
 public:
  ProcessGroupCohort(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                     std::chrono::milliseconds timeout, GroupSettings settings);
  // A group over a communicator made elsewhere: that of the Cohort job this process is a worker
  // of (python/job_worker.h), whose launcher writes the hang reports. Released with the group.
  ProcessGroupCohort(const c10::intrusive_ptr<c10d::Store>& store,
                     std::shared_ptr<comm::Communicator> comm, GroupSettings settings);
  ~ProcessGroupCohort() override;

  const std::string getBackendName() const override { return "cohort"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  // process_group_rooted.cc
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;

  comm::Communicator& communicator() { return *comm_; }
  trace::ExchangeClock* exchange_clock() const { return settings_.exchange_clock.get(); }

 private:
  // ConfigError naming `op` unless 0 <= root < size.
  int checked_root(int64_t root, const char* op) const;
  c10::intrusive_ptr<c10d::Work> wrap(c10d::OpType type, std::shared_ptr<comm::Work> work,
                                      std::vector<at::Tensor> outputs,
                                      std::vector<at::Tensor> keep = {},
                                      std::function<void()> finish = nullptr);

  C10dStore store_;
  GroupSettings settings_;
  std::shared_ptr<comm::Communicator> comm_;
  std::shared_ptr<HangReports> hangs_;  // reads the communicator's recorder: after it (or null)
};

}  // namespace cohort::dist
