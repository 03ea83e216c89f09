// A profile: what the simulator knows of the hardware and of the job, as measured by `cohort
// calibrate` on this machine or written by hand for hardware that is not here (docs/simulate.md
// documents every key). JSON:
//
//   {"profile": 1, "name": "...", "sources": ["where each figure comes from", ...],
//    "host": {"cores": 2, "ranks_per_host": 1},
//    "transports": {"tcp":     {"latency_us": 30, "gbytes_per_s": 2.9,
//                               "oversubscribed_latency_us": 45, "oversubscribed_exponent": 1.2},
//                   "shm":     {"latency_us": 4, "gbytes_per_s": 6.5},
//                   "network": {"latency_us": 30, "gbytes_per_s": 2.9}},
//    "kernels": {"reduce_gbytes_per_s": 6.0,
//                "codecs": {"fp16": {"encode_gbytes_per_s": 4, "decode_gbytes_per_s": 5}, ...}},
//    "compute": {"device": "cpu", "threads": 1, "batch_per_worker": 64, "data_ms": 1.2,
//                "forward_ms": 9.0, "backward_ms": 18.0, "optimizer_ms": 1.0, "shared_slowdown": 1.1,
//                "gradients": [{"name": "fc.bias", "bytes": 40, "rows": 1, "cols": 10,
//                               "ready_ms": 0.4}, ...]}}
//
// Transports: tcp and shm between ranks of one host (shm optional), network between hosts; the
// bandwidth is that of one stream each way while the other way is busy too (what a ring step
// sees); oversubscribed_latency_us (optional) a message's latency when the host runs twice as
// many ranks' threads as it has cores, oversubscribed_exponent (optional) how the extra grows
// beyond. Kernels and codecs: per core, in bytes of f32 input.
// Compute: one worker alone with `threads` threads; gradients in the order backward produces
// them, each with the time from the start of backward at which it is ready.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cohort::sim {

struct LinkCost {
  double latency_s = 0;          // one message, send to arrival, beyond its bytes
  double bytes_per_s = 0;        // one stream, each way
  // The same with twice as many ranks' threads on the host as cores (0: not measured, taken as
  // latency_s): a message then also waits for its receiver to get a core back.
  double oversubscribed_latency_s = 0;
  // How that wait grows with the threads per core beyond one: (threads per core - 1) to this
  // power, 1 at two per core (1: in proportion; fitted from a second measurement at eight).
  double oversubscribed_exponent = 1;
};

// What TCP carries of a link whose rate counts whole frames (`line_bytes_per_s`, the rate a
// NIC or a tc qdisc is quoted at): each packet of `mtu` bytes carries mtu - 52 bytes of payload
// (IPv4 and TCP headers with timestamps, Linux's default) and takes mtu + `framing` bytes of the
// link (Ethernet: header 14, FCS 4, preamble 8, inter-frame gap 12, together 38).
double tcp_payload_rate(double line_bytes_per_s, int mtu, int framing);

struct CodecCost {
  double encode_bytes_per_s = 0;  // per core, f32 input bytes
  double decode_bytes_per_s = 0;
};

struct Gradient {
  std::string name;
  uint64_t bytes = 0;  // f32
  uint64_t rows = 1, cols = 0;
  double ready_s = 0;  // from the start of backward, one worker alone
};

struct Compute {
  bool on_device = false;  // "gpu": each rank computes on a device of its own, not the host's cores
  int threads = 1;
  int64_t batch_per_worker = 1;
  double data_s = 0, forward_s = 0, backward_s = 0, optimizer_s = 0;
  // How much longer the compute takes when every core of the host runs a worker's threads (they
  // share memory bandwidth and caches) than alone: forward's time with cores / threads workers
  // over its time with one. Ranks that keep fewer of the other cores busy pay in proportion.
  double shared_slowdown = 1;
  // And beyond that when the host has more workers' threads than cores (twice as many, measured),
  // over the fair share alone: what switching between them and refilling the caches costs.
  double oversubscribed_slowdown = 1;
  std::vector<Gradient> gradients;
  uint64_t gradient_bytes() const {
    uint64_t n = 0;
    for (const auto& g : gradients) n += g.bytes;
    return n;
  }
  double step_s() const { return data_s + forward_s + backward_s + optimizer_s; }
};

struct Profile {
  std::string name;
  std::vector<std::string> sources;
  int cores = 1;           // per host
  int ranks_per_host = 1;  // the default placement
  LinkCost tcp;
  std::optional<LinkCost> shm;
  LinkCost network;
  double reduce_bytes_per_s = 0;
  std::map<std::string, CodecCost, std::less<>> codecs;  // fp16, bf16, int8, topk, powersgd
  // A job's compute; absent from a profile of the machine alone (cohort calibrate without a job).
  bool has_compute = false;
  Compute compute;
};

// Reads and checks a profile; ConfigError "<file>:<line>:<column>: <key>: <what>" for anything
// malformed or out of range.
Profile read_profile(const std::string& path);
Profile parse_profile(std::string_view json, const std::string& source);
// The profile as JSON that parse_profile reads back (numbers in the same units as the file).
std::string profile_json(const Profile& p);

}  // namespace cohort::sim
