// The job configuration: a tree of plain structs parsed from a YAML job file, validated, and
// written back. Every key has a default (docs/job-config.md lists them with their ranges).
//
// Errors are ConfigErrors that say where the bad value is and which key it belongs to:
//   job.yaml:7:12: train.batch_size: expected a positive integer, got "sixty"
//   --set train.lr=x: train.lr: unknown key; did you mean 'train.optimizer.lr'?
// This header does not include libtorch: the launcher and tools read job files without it.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cohort::train {

enum class ModelKind { Mlp, Cnn, ResNet };
enum class DatasetKind { FashionMnist, Mnist, Synthetic };
enum class OptimizerKind { Sgd, Adam };
enum class LrScaling { None, Linear };
enum class MemoryFormat { Auto, ChannelsLast, Contiguous };
enum class SyncKind { AllReduce, LocalSgd, Ssp, Async };
enum class LrScale { None, InverseStaleness };
enum class OuterOptimizerKind { None, Sgd, Nesterov };

std::string_view model_kind_name(ModelKind k);          // "mlp" | "cnn" | "resnet"
std::string_view dataset_kind_name(DatasetKind k);      // "fashion-mnist" | "mnist" | "synthetic"
std::string_view optimizer_kind_name(OptimizerKind k);  // "sgd" | "adam"
std::string_view lr_scaling_name(LrScaling s);          // "none" | "linear"
std::string_view memory_format_name(MemoryFormat f);    // "auto" | "channels_last" | "contiguous"
std::string_view sync_kind_name(SyncKind k);  // "allreduce" | "local_sgd" | "ssp" | "async"
std::string_view lr_scale_name(LrScale s);    // "none" | "inverse_staleness"
std::string_view outer_optimizer_name(OuterOptimizerKind k);  // "none" | "sgd" | "nesterov"

// memory_format: the layout of 4-D parameters and activations. auto is channels_last for models
// with convolutions (oneDNN's convolutions run faster on it on CPUs), contiguous otherwise.
struct ModelConfig {
  ModelKind name = ModelKind::Mlp;
  MemoryFormat memory_format = MemoryFormat::Auto;
  bool operator==(const ModelConfig&) const = default;
};

// fashion-mnist and mnist read gzipped IDX files from `path`; synthetic generates `samples`
// examples of `shape` ([C, H, W]) in `classes` classes from the job's seed.
struct DataConfig {
  DatasetKind name = DatasetKind::FashionMnist;
  std::string path = "/usr/share/datasets/fashion-mnist";
  int64_t samples = 10000;
  std::vector<int64_t> shape = {1, 28, 28};
  int64_t classes = 10;
  bool operator==(const DataConfig&) const = default;
};

struct OptimizerConfig {
  OptimizerKind name = OptimizerKind::Sgd;
  double lr = 0.05;       // the default depends on name: 0.05 for sgd, 0.001 for adam
  double momentum = 0.9;  // sgd only
  double weight_decay = 0.0;
  std::array<double, 2> betas = {0.9, 0.999};  // adam only
  double eps = 1e-8;                           // adam only
  bool operator==(const OptimizerConfig&) const = default;
};

struct LrScheduleConfig {
  int64_t warmup_steps = 0;
  LrScaling scaling = LrScaling::None;
  bool operator==(const LrScheduleConfig&) const = default;
};

struct TrainConfig {
  int64_t epochs = 1;
  int64_t max_steps = 0;    // 0: no limit other than epochs
  int64_t batch_size = 64;  // per worker
  uint64_t seed = 0;
  int64_t log_every_steps = 10;
  bool drop_last = false;        // see DistributedSampler (sampler.h)
  int64_t eval_every_steps = 0;  // 0: evaluate on the test set only at the end
  double stop_at_accuracy = 0;   // > 0: stop once a periodic evaluation reaches it
  OptimizerConfig optimizer;
  LrScheduleConfig lr_schedule;
  bool operator==(const TrainConfig&) const = default;
};

struct CommConfig {
  // auto | ring | halving_doubling | recursive_doubling | hierarchical (comm::parse_algorithm)
  std::string algorithm = "auto";
  // What carries the pairs of workers on one host: auto | tcp | shm (comm::parse_transport).
  std::string transport = "auto";
  // Whether the data frames between workers carry a MAC: none | hmac | gmac
  // (comm::parse_integrity).
  std::string integrity = "none";
  double bucket_mb = 25.0;
  // The model's buffers (BatchNorm's running statistics) at every step: broadcast from rank 0 |
  // average | none (ddp::BufferSync).
  std::string buffers = "broadcast";
  double timeout_s = 30.0;
  // Gradient compression (compress/codec.h): none | fp16 | bf16 | int8 | topk | powersgd, and
  // the options of each codec (comm.int8.*, comm.topk.*, comm.powersgd.*).
  std::string compression = "none";
  double compression_min_kb = 64.0;  // buckets smaller than this go uncompressed
  bool error_feedback = true;
  int64_t int8_chunk = 256;
  bool int8_stochastic_rounding = true;
  double topk_ratio = 0.01;
  int64_t topk_warmup_steps = 0;
  int64_t powersgd_rank = 4;
  int64_t powersgd_warmup_steps = 10;
  bool operator==(const CommConfig&) const = default;
};

// How the replicas synchronise (docs/job-config.md, "sync"; train/sync_mode.h).
//   allreduce: gradients are averaged at every step (DDP), the replicas stay bitwise equal.
//   local_sgd: each worker steps on its own gradients and the models are averaged every `period`
//     steps (post-local SGD: the first `warmup_steps` steps are synchronous). An outer optimizer
//     may apply the averaged update (DiLoCo: Nesterov momentum on the change since the last
//     average); none simply takes the average.
struct OuterOptimizerConfig {
  OuterOptimizerKind name = OuterOptimizerKind::None;
  double lr = 0.7;
  double momentum = 0.9;
  bool operator==(const OuterOptimizerConfig&) const = default;
};
// balance (auto): each worker's share of the global batch follows its measured speed (its busy
// time per step, re-measured at every commit), so that a persistent straggler costs only its own
// share.
//   ssp: parameter servers (JobConfig::parameter_servers) hold the model and apply the optimizer;
//     each worker pushes its gradients and pulls the parameters, and runs at most `staleness`
//     steps ahead of the slowest. async: no bound. Either may correct stale gradients:
//     lr_scale inverse_staleness (1 / staleness) or delay_compensation lambda (DC-ASGD).
struct SyncConfig {
  SyncKind mode = SyncKind::AllReduce;
  bool balance = false;
  int64_t period = 8;
  int64_t warmup_steps = 0;
  OuterOptimizerConfig outer_optimizer;
  int64_t staleness = 3;
  // ssp: after its push, a worker waits up to this share of its step time for the clock it
  // pushed to be applied (every worker's push of it), so that without a straggler its next step
  // uses the newest parameters; 0: only the staleness bound waits.
  double fresh_wait = 0.5;
  // ssp: a worker sees its own pushes at once (SSP's read-my-writes): to the parameters it pulls
  // it adds the optimizer steps it predicts for its own clocks that a shard has not applied yet
  // (ps/own_updates.h); false: it trains on the parameters as pulled.
  bool read_my_writes = true;
  LrScale lr_scale = LrScale::None;
  double delay_compensation = 0;
  bool uses_servers() const { return mode == SyncKind::Ssp || mode == SyncKind::Async; }
  bool operator==(const SyncConfig&) const = default;
};

struct CheckpointConfig {
  int64_t every_steps = 500;  // 0: no periodic checkpoints
  int64_t keep = 3;
  bool operator==(const CheckpointConfig&) const = default;
};

// Fault tolerance (docs/job-config.md, "elastic"): how failures are detected and how the world
// shrinks and grows again. 0 for min_workers / max_workers means "workers".
struct ElasticConfig {
  int64_t min_workers = 0;            // below this the job waits for joiners, then fails
  int64_t max_workers = 0;            // joiners beyond this are not admitted
  double heartbeat_s = 1.0;           // each worker's heartbeat interval
  double failure_timeout_s = 10.0;    // a worker silent this long is declared lost
  int64_t max_restarts = 0;           // replacements the launcher may start over the whole job
  int64_t snapshot_every_steps = 20;  // in-memory snapshots, and when joiners are admitted
  double join_timeout_s = 60.0;       // how long the job waits below min_workers
  // How long workers train on without their coordinator before they give up (cohort run --resume
  // re-adopts them within it).
  double coordinator_wait_s = 300.0;
  int64_t min_or(int64_t workers) const { return min_workers > 0 ? min_workers : workers; }
  int64_t max_or(int64_t workers) const { return max_workers > 0 ? max_workers : workers; }
  bool operator==(const ElasticConfig&) const = default;
};

// The live web console (docs/console.md). A `dashboard:` section turns it on.
struct DashboardConfig {
  bool enabled = false;
  std::string bind = "127.0.0.1";  // loopback unless the job file says otherwise
  int64_t port = 8080;             // 0: any free port (the URL goes to <run_dir>/console.url)
  bool operator==(const DashboardConfig&) const = default;
};

// Where the job's rendezvous and membership live (docs/job-config.md, "coordinator"): empty, the
// store embedded in the coordinator; "etcd://HOST:PORT[,HOST:PORT...]/PREFIX", an etcd cluster
// (each run under PREFIX/<run directory's name>).
struct CoordinatorConfig {
  std::string store;
  // With an etcd store, who stands by to take the job over when its coordinator dies and no
  // `cohort run --standby` does: "workers" (one of them starts a standby coordinator) or "none".
  std::string standby = "workers";
  bool operator==(const CoordinatorConfig&) const = default;
};

// A fault injected on purpose, to test how the job and its tools react (docs/job-config.md).
// It fires on `rank` at the step boundary where that rank has completed `at_step` steps.
// Stragglers has no rank: from at_step on, in each window of `every` steps one worker, chosen at
// random from the job's seed and the window, takes `factor` times its own compute per step.
enum class FaultKind { Kill, Hang, Slow, Disconnect, Stragglers };
// "kill" | "hang" | "slow" | "disconnect" | "stragglers"
std::string_view fault_kind_name(FaultKind k);
struct FaultConfig {
  FaultKind kind = FaultKind::Kill;
  int64_t rank = 0;
  int64_t at_step = 0;
  double seconds = 0;  // slow: extra seconds per step; hang: how long (0: for good)
  double factor = 0;   // slow (instead of seconds), stragglers: steps take factor x their compute
  int64_t every = 0;   // stragglers: the window, in steps
  bool operator==(const FaultConfig&) const = default;
};

struct DebugConfig {
  bool check_collectives = false;  // compare each collective's fingerprint across ranks first
  int64_t check_params_every = 0;  // compare a hash of the parameters every K steps (0: never)
  double hang_timeout_s = 300;     // no progress on any rank for this long: hang report (0: off)
  int64_t flight_recorder_entries = 256;  // collectives each rank remembers
  double straggler_margin = 0.25;  // busy this much over the others' median: slow (straggler.h)
  int64_t straggler_window = 20;   // consecutive slow steps that make a straggler
  double bandwidth_probe_mb = 4;   // the transport probe's allreduce at start-up (0: none)
  bool operator==(const DebugConfig&) const = default;
};

// The timeline (trace/tracer.h): <run_dir>/trace/rank-N.json, merged by `cohort trace merge`.
struct TraceConfig {
  bool enabled = false;
  int64_t max_pending_events = 1 << 20;  // events buffered for the writer; beyond: dropped
  bool operator==(const TraceConfig&) const = default;
};

// A Python program as the job's workers (docs/job-config.md, "program"): each worker runs
// `interpreter -u python args...` with torchrun's variables instead of Cohort's own trainer.
struct ProgramConfig {
  std::string python;  // the script; empty: the job trains one of Cohort's models
  std::vector<std::string> args;
  std::string interpreter = "/usr/bin/python3";
  bool operator==(const ProgramConfig&) const = default;
};

struct JobConfig {
  std::string name = "cohort-job";
  int64_t workers = 1;
  // Parameter-server processes (sync.mode ssp and async; 0 otherwise).
  int64_t parameter_servers = 0;
  int64_t threads_per_worker = 1;
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  CommConfig comm;
  SyncConfig sync;
  CheckpointConfig checkpoint;
  ElasticConfig elastic;
  DashboardConfig dashboard;
  CoordinatorConfig coordinator;
  std::vector<FaultConfig> faults;
  DebugConfig debug;
  TraceConfig trace;
  ProgramConfig program;
  bool operator==(const JobConfig&) const = default;
};

struct LoadOptions {
  // "key.sub=value" overrides (the command line's --set), applied in order on the YAML tree
  // before validation. The value is parsed as YAML, so "shape=[3,32,32]" sets a list.
  std::vector<std::string> overrides;
  // Check that data.path exists and holds the dataset's files. Tools that only print or convert a
  // job file on another machine turn this off.
  bool check_paths = true;
};

// Reads and validates a job file. Throws ConfigError (cohort/base/error.h).
JobConfig load_job_config(const std::string& path, const LoadOptions& options = {});
// Same, from YAML text; `source` names it in error messages (a file name, "<string>").
JobConfig parse_job_config(std::string_view yaml, const std::string& source,
                           const LoadOptions& options = {});

// The resolved configuration as YAML, every applicable key written out. parse_job_config() of the
// result gives back an equal JobConfig.
std::string to_yaml(const JobConfig& config);

// The [C, H, W] shape of one example and the number of classes the data gives the model.
struct InputSpec {
  std::vector<int64_t> shape = {};
  int64_t classes = 0;
  bool operator==(const InputSpec&) const = default;
};
InputSpec input_spec(const DataConfig& data);

}  // namespace cohort::train
