// Calibration: the figures of a profile (profile.h) measured on this machine.
//
// Transports: from `cohort bench allreduce` of two worker processes (cli/calibrate.cc): the
// latency is the time of an allreduce of 8 bytes by recursive doubling (one message each way at
// once, the hand-off to the communication thread included), the bandwidth what makes the
// simulator's 2-rank ring of 4 and 16 MiB take as long as the measured one (fit_bandwidth); the
// oversubscribed latency what makes the simulated 8-byte allreduce of twice as many ranks as
// cores take as long as the measured one (fit_oversubscribed_latency), and its exponent the same
// with more (fit_oversubscribed_exponent).
// Kernels: the reduction kernel and each codec on 16 MiB of f32, the median of repeated runs.
// Compute: from the timeline of a short run of the job (compute_from_trace), by the caller.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cohort/comm/types.h"
#include "cohort/sim/profile.h"

namespace cohort::sim {

// The bandwidth of one stream of `transport` (Tcp or Shm) between two ranks of one host that
// makes the simulated allreduce of `bytes` with `algorithm` take the `seconds` measured for it,
// the profile's latency and kernels as they are: the model is calibrated on what the real
// communicator does, segment pipelining and the cores the two ranks share included.
double fit_bandwidth(const Profile& profile, comm::Transport transport, comm::Algorithm algorithm,
                     size_t bytes, double seconds);

// The latency of `transport` between ranks of one host with `ranks` ranks on its profile.cores
// cores (more ranks than cores) that makes the simulated recursive-doubling allreduce of 8 bytes
// take the `seconds` measured for it: LinkCost::oversubscribed_latency_s, the profile's
// latency_s as it is. Never below latency_s.
double fit_oversubscribed_latency(const Profile& profile, comm::Transport transport, int ranks,
                                  double seconds);
// The same with more than twice as many ranks as cores, the oversubscribed latency as it is:
// LinkCost::oversubscribed_exponent, in [0, 4].
double fit_oversubscribed_exponent(const Profile& profile, comm::Transport transport, int ranks,
                                   double seconds);

// The reduction kernel's rate (f32 sum, bytes of output per second on one core).
double measure_reduce();

// Each codec's rates (fp16, bf16, int8, topk, powersgd), per core in f32 input bytes. Top-k and
// PowerSGD, whose cost depends on the shapes of the tensors, are measured on `gradients` as one
// bucket (a job's own), or on a 2048 x 2048 matrix when there are none.
std::map<std::string, CodecCost, std::less<>> measure_codecs(
    double topk_ratio = 0.01, int powersgd_rank = 4, const std::vector<Gradient>& gradients = {});

// One worker's compute from its trace (trace/tracer.h: spans data, forward, backward, optimizer
// with their step; instants "bucket N ready" with their bytes) of a run with buckets as small
// as DDP makes them, so that the instants time the gradients. `gradients` are the model's, in the
// order backward produces them (bytes, rows, cols, name; ready_s is filled here). Steps before
// `skip` are warm-up; each figure is the median over the rest. Throws Error when the trace lacks
// what it needs.
Compute compute_from_trace(const nlohmann::json& trace, std::vector<Gradient> gradients,
                           double bucket_mb, int64_t skip);

// The median duration of `phase` ("forward", ...) over the trace's steps after `skip`.
double phase_median_s(const nlohmann::json& trace, const std::string& phase, int64_t skip);

}  // namespace cohort::sim
