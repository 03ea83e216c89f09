// The event-level simulation of one training step of a data-parallel job on a modelled cluster.
//
// Every rank runs two threads, as a Cohort worker does. Its training thread loads a batch, runs
// forward, then backward in pieces: each gradient bucket (DDP's rule: gradients in the order
// backward produces them, a bucket closed once it holds its capacity, the first one 1 MiB) is
// handed to the communication thread the moment its last gradient is ready, at its calibrated
// time. The communication thread runs the buckets' collectives one after another, each with the
// schedule the communicator's own algorithm lays out for it (plan.h): segments go over the
// modelled links, reductions and codecs' work run on the modelled cores. After backward the
// training thread waits for every bucket (and does the codecs' work that DDP does there), then
// steps the optimizer. Whatever runs at once shares what it runs on (flows.h): the ranks of a host
// its cores and its link to the network; compute on a GPU takes no host core.
//
// What it does not model: convergence (a choice that shortens a step may need more steps), the
// kernel's socket buffers and congestion control, and memory bandwidth shared between cores.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cohort/comm/types.h"
#include "cohort/compress/codec.h"
#include "cohort/sim/profile.h"

namespace cohort::sim {

// Where the workers are.
struct Layout {
  int workers = 1;
  int ranks_per_host = 1;  // hosts = ceil(workers / ranks_per_host), ranks numbered host by host
  // The hosts are network namespaces of one machine (the emulated cluster): all their ranks share
  // that machine's cores, while bytes between hosts still cross the modelled links.
  bool one_machine = false;
  // --link and --link-latency: the network between hosts instead of the profile's.
  std::optional<double> link_bytes_per_s;
  std::optional<double> link_latency_s;
  int hosts() const { return (workers + ranks_per_host - 1) / ranks_per_host; }
};

enum class SyncMode { Allreduce, LocalSgd };

// One configuration of the job: the choices the simulator compares.
struct Choice {
  comm::Algorithm algorithm = comm::Algorithm::Auto;
  double bucket_mb = 25;
  compress::CompressionOptions compression = {};  // .method is the codec
  comm::Transport transport = comm::Transport::Auto;  // within a host: shm where the profile has it
  SyncMode sync = SyncMode::Allreduce;
  int period = 8;  // local_sgd: steps between averages
  size_t chunk_bytes = 256 << 10;
};

// fp16, bf16 and int8 send each rank's block to every other rank directly (allreduce_encoded):
// 2(n - 1) exchanges per rank, each planned as its own record, n^2 in all. Beyond this many
// workers the plan would not fit in memory (about 5 GB a bucket size at 4,096): such a choice is
// refused, and the sweep leaves those codecs out.
inline constexpr int kMaxEncodedWorkers = 1024;

struct Prediction {
  int workers = 1;
  int hosts = 1;
  double step_s = 0;           // time per step (local_sgd: the mean over a period)
  double compute_s = 0;        // mean over ranks of the training thread's own work, as slowed by sharing
  double exposed_comm_s = 0;   // mean over ranks of the time blocked on the exchange after backward
  double link_bytes = 0;       // per step: bytes out of the busiest host's network link
  double rank_bytes = 0;       // per step: payload bytes the busiest rank sent
  double samples_per_s = 0;
  double efficiency = 1;       // samples/s over workers x one worker's samples/s alone
  double closed_form_step_s = 0;  // the alpha-beta-gamma estimate (closed_form.h), as a check
  size_t buckets = 0;
  std::vector<std::string> algorithms;  // per bucket, what Auto (or the choice) resolved to
};

// One step of `layout.workers` ranks with `choice`. Throws Error when the choice cannot apply
// (shared memory the profile lacks, a codec it has no cost for) and when the plans stall (a
// schedule that would deadlock).
Prediction simulate(const Profile& profile, const Layout& layout, const Choice& choice);

// What the compute of one rank takes over its time alone, for the cores its host's workers keep
// busy (Compute::shared_slowdown, in proportion to the other cores in use).
double compute_slowdown(const Profile& profile, const Layout& layout);

// Whether `choice` puts pairs of ranks on one host on `profile`'s shared memory (not where the
// profile has none: the choice of Transport::Shm is then refused by simulate()).
bool shared_memory_within_host(const Profile& profile, const Choice& choice);
// What carries a pair of ranks on one host.
const LinkCost& within_host_link(const Profile& profile, const Choice& choice);

// The threads the ranks of one host run (on one machine, every rank's) per core of it.
double threads_per_core(const Profile& profile, const Layout& layout);
// How much longer than link.latency_s a message takes when its receiver's host runs `load`
// threads per core: none up to one per core; beyond, the wait for the receiver to get a core back,
// as measured at two per core (LinkCost::oversubscribed_latency_s) times the threads per core
// beyond one to the power LinkCost::oversubscribed_exponent.
double receiver_wait_s(const LinkCost& link, double load);

// DDP's buckets for `bucket_mb`: indices into profile.compute.gradients, in launch order.
std::vector<std::vector<size_t>> buckets_of(const Compute& compute, double bucket_mb);

}  // namespace cohort::sim
