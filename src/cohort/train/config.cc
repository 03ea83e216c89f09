#include "cohort/train/config.h"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>

#include "cohort/base/error.h"
#include "cohort/base/yaml_reader.h"
#include "cohort/store/etcd_store.h"
#include "cohort/train/config_reading.h"
#include "cohort/train/idx.h"

namespace cohort::train {

namespace config_detail {

const Schema& schema() {
  static const Schema s = {
      {"",
       {"name", "workers", "parameter_servers", "threads_per_worker", "model", "data", "train",
        "comm", "sync", "checkpoint", "elastic", "dashboard", "coordinator", "faults", "debug",
        "trace", "program"}},
      {"model", {"name", "memory_format"}},
      {"data", {"name", "path", "samples", "shape", "classes"}},
      {"train",
       {"epochs", "max_steps", "batch_size", "seed", "log_every_steps", "drop_last",
        "eval_every_steps", "stop_at_accuracy", "optimizer", "lr_schedule"}},
      {"train.optimizer", {"name", "lr", "momentum", "weight_decay", "betas", "eps"}},
      {"train.lr_schedule", {"warmup_steps", "scaling"}},
      {"comm",
       {"algorithm", "transport", "integrity", "bucket_mb", "buffers", "timeout_s", "compression",
        "compression_min_kb", "error_feedback", "int8", "topk", "powersgd"}},
      {"comm.int8", {"chunk", "stochastic_rounding"}},
      {"comm.topk", {"ratio", "warmup_steps"}},
      {"comm.powersgd", {"rank", "warmup_steps"}},
      {"sync",
       {"mode", "balance", "period", "warmup_steps", "outer_optimizer", "staleness", "fresh_wait",
        "read_my_writes", "lr_scale", "delay_compensation"}},
      {"sync.outer_optimizer", {"name", "lr", "momentum"}},
      {"checkpoint", {"every_steps", "keep"}},
      {"elastic",
       {"min_workers", "max_workers", "heartbeat_s", "failure_timeout_s", "max_restarts",
        "snapshot_every_steps", "join_timeout_s", "coordinator_wait_s"}},
      {"dashboard", {"enabled", "bind", "port"}},
      {"coordinator", {"store", "standby"}},
      {"faults[]", {"kind", "rank", "at_step", "seconds", "factor", "every"}},
      {"debug",
       {"check_collectives", "check_params_every", "hang_timeout_s", "flight_recorder_entries",
        "straggler_margin", "straggler_window", "bandwidth_probe_mb"}},
      {"trace", {"enabled", "max_pending_events"}},
      {"program", {"python", "args", "interpreter"}},
  };
  return s;
}

}  // namespace config_detail

using namespace config_detail;

namespace {

// Synthetic data lives in memory as float32: cap it at 2^28 values (1 GiB).
constexpr int64_t kMaxSyntheticValues = int64_t{1} << 28;

constexpr auto kModels = {ModelKind::Mlp, ModelKind::Cnn, ModelKind::ResNet};
constexpr auto kMemoryFormats = {MemoryFormat::Auto, MemoryFormat::ChannelsLast,
                                 MemoryFormat::Contiguous};
constexpr auto kDatasets = {DatasetKind::FashionMnist, DatasetKind::Mnist, DatasetKind::Synthetic};
constexpr auto kOptimizers = {OptimizerKind::Sgd, OptimizerKind::Adam};
constexpr auto kScalings = {LrScaling::None, LrScaling::Linear};
const std::vector<std::string> kAlgorithms = {
    "auto", "ring", "halving_doubling", "recursive_doubling", "hierarchical", "linear"};
const std::vector<std::string> kTransports = {"auto", "tcp", "shm"};
const std::vector<std::string> kIntegrities = {"none", "hmac", "gmac"};
const std::vector<std::string> kBufferSyncs = {"broadcast", "average", "none"};
const std::vector<std::string> kCompressions = {"none", "fp16", "bf16", "int8", "topk", "powersgd"};

bool is_dir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string default_data_path(DatasetKind k) {
  return k == DatasetKind::Mnist ? "/usr/share/datasets/mnist"
                                 : "/usr/share/datasets/fashion-mnist";
}

void read_data(const YamlReader& r, const YAML::Node& root, const LoadOptions& opt, DataConfig& d) {
  YAML::Node m = r.section(root, "data");
  if (auto s = r.get_choice(m, "data.name", names(kDatasets, dataset_kind_name))) {
    d.name = parse_enum(*s, kDatasets, dataset_kind_name);
  }
  const std::string when = "when data.name is " + std::string(dataset_kind_name(d.name));
  if (d.name == DatasetKind::Synthetic) {
    reject_if_present(r, m, "data.path", when);
    if (auto v = r.get_int(m, "data.samples", 1, kMaxInt, "a positive integer")) d.samples = *v;
    if (auto v = r.get_int_list(m, "data.shape", 3, 1, 4096,
                                "a list of 3 positive integers "
                                "[channels, height, width]")) {
      d.shape = *v;
    }
    if (auto v = r.get_int(m, "data.classes", 2, 1 << 20, "an integer >= 2")) d.classes = *v;
    int64_t per_sample = d.shape[0] * d.shape[1] * d.shape[2];
    if (d.samples > kMaxSyntheticValues / per_sample) {
      r.fail("data.samples", YamlReader::child(m, "data.samples"),
             std::to_string(d.samples) + " samples of " + std::to_string(per_sample) +
                 " values exceed the synthetic data limit of 2^28 values (1 GiB)");
    }
    return;
  }
  for (const char* key : {"data.samples", "data.shape", "data.classes"}) {
    reject_if_present(r, m, key, when + " (only to synthetic)");
  }
  d.path = default_data_path(d.name);
  if (auto s = r.get_string(m, "data.path")) {
    if (s->empty()) r.fail("data.path", YamlReader::child(m, "data.path"), "must not be empty");
    d.path = *s;
  }
  if (!opt.check_paths) return;
  YAML::Node at = YamlReader::child(m, "data.path");
  const std::string dflt = at.IsDefined() ? "" : " (the default for this data.name)";
  if (!is_dir(d.path)) r.fail("data.path", at, "no such directory \"" + d.path + "\"" + dflt);
  for (const std::string& base : {idx_images_name(Split::Train), idx_labels_name(Split::Train)}) {
    if (!find_idx_file(d.path, base)) {
      r.fail("data.path", at, "\"" + d.path + "\"" + dflt + " has no " + base + ".gz");
    }
  }
}

void read_optimizer(const YamlReader& r, const YAML::Node& train, OptimizerConfig& o) {
  YAML::Node m = r.section(train, "train.optimizer");
  if (auto s = r.get_choice(m, "train.optimizer.name", names(kOptimizers, optimizer_kind_name))) {
    o.name = parse_enum(*s, kOptimizers, optimizer_kind_name);
  }
  const std::string when =
      "when train.optimizer.name is " + std::string(optimizer_kind_name(o.name));
  o.lr = o.name == OptimizerKind::Adam ? 0.001 : 0.05;
  if (auto v = r.get_number(m, "train.optimizer.lr", 0, true, kInf, false, "a number > 0")) {
    o.lr = *v;
  }
  if (auto v =
          r.get_number(m, "train.optimizer.weight_decay", 0, false, kInf, false, "a number >= 0")) {
    o.weight_decay = *v;
  }
  if (o.name == OptimizerKind::Sgd) {
    reject_if_present(r, m, "train.optimizer.betas", when + " (only to adam)");
    reject_if_present(r, m, "train.optimizer.eps", when + " (only to adam)");
    if (auto v =
            r.get_number(m, "train.optimizer.momentum", 0, false, 1, true, "a number in [0, 1)")) {
      o.momentum = *v;
    }
    return;
  }
  reject_if_present(r, m, "train.optimizer.momentum", when + " (only to sgd)");
  if (auto v = r.get_number(m, "train.optimizer.eps", 0, true, kInf, false, "a number > 0")) {
    o.eps = *v;
  }
  YAML::Node betas = YamlReader::child(m, "train.optimizer.betas");
  if (betas.IsDefined()) {
    if (!betas.IsSequence() || betas.size() != 2) {
      r.fail("train.optimizer.betas", betas,
             "expected a list of 2 numbers in [0, 1), got " + YamlReader::describe(betas));
    }
    for (size_t i = 0; i < 2; ++i) {
      o.betas[i] = r.number_value(betas[i], "train.optimizer.betas[" + std::to_string(i) + "]", 0,
                                  false, 1, true, "a number in [0, 1)");
    }
  }
}

void read_train(const YamlReader& r, const YAML::Node& root, TrainConfig& t) {
  YAML::Node m = r.section(root, "train");
  if (auto v = r.get_int(m, "train.epochs", 1, kMaxInt, "a positive integer")) t.epochs = *v;
  if (auto v = r.get_int(m, "train.max_steps", 0, kMaxInt, "a non-negative integer")) {
    t.max_steps = *v;
  }
  if (auto v = r.get_int(m, "train.batch_size", 1, 1 << 24, "a positive integer")) {
    t.batch_size = *v;
  }
  if (auto v = r.get_int(m, "train.seed", 0, kMaxInt, "a non-negative integer")) {
    t.seed = static_cast<uint64_t>(*v);
  }
  if (auto v = r.get_int(m, "train.log_every_steps", 1, kMaxInt, "a positive integer")) {
    t.log_every_steps = *v;
  }
  if (auto v = r.get_bool(m, "train.drop_last")) t.drop_last = *v;
  if (auto v = r.get_int(m, "train.eval_every_steps", 0, kMaxInt, "a non-negative integer")) {
    t.eval_every_steps = *v;
  }
  if (auto v =
          r.get_number(m, "train.stop_at_accuracy", 0, false, 1, false, "a number in [0, 1]")) {
    t.stop_at_accuracy = *v;
  }
  if (t.stop_at_accuracy > 0 && t.eval_every_steps == 0) {
    r.fail("train.stop_at_accuracy", YamlReader::child(m, "train.stop_at_accuracy"),
           "needs train.eval_every_steps > 0 (the accuracy is measured by the periodic "
           "evaluation)");
  }
  read_optimizer(r, m, t.optimizer);
  YAML::Node s = r.section(m, "train.lr_schedule");
  if (auto v =
          r.get_int(s, "train.lr_schedule.warmup_steps", 0, kMaxInt, "a non-negative integer")) {
    t.lr_schedule.warmup_steps = *v;
  }
  if (auto v = r.get_choice(s, "train.lr_schedule.scaling", names(kScalings, lr_scaling_name))) {
    t.lr_schedule.scaling = parse_enum(*v, kScalings, lr_scaling_name);
  }
}

void read_elastic(const YamlReader& r, const YAML::Node& root, JobConfig& c) {
  YAML::Node m = r.section(root, "elastic");
  ElasticConfig& e = c.elastic;
  const char* count = "an integer in [0, 4096] (0: workers)";
  if (auto v = r.get_int(m, "elastic.min_workers", 0, 4096, count)) e.min_workers = *v;
  if (auto v = r.get_int(m, "elastic.max_workers", 0, 4096, count)) e.max_workers = *v;
  const char* seconds = "a number of seconds in (0, 3600]";
  if (auto v = r.get_number(m, "elastic.heartbeat_s", 0, true, 3600, false, seconds)) {
    e.heartbeat_s = *v;
  }
  if (auto v = r.get_number(m, "elastic.failure_timeout_s", 0, true, 3600, false, seconds)) {
    e.failure_timeout_s = *v;
  }
  if (auto v = r.get_number(m, "elastic.join_timeout_s", 0, true, 86400, false,
                            "a number of seconds in (0, 86400]")) {
    e.join_timeout_s = *v;
  }
  const auto wait = r.get_number(m, "elastic.coordinator_wait_s", 0, true, 86400, false,
                                 "a number of seconds in (0, 86400]");
  if (wait) e.coordinator_wait_s = *wait;
  if (auto v = r.get_int(m, "elastic.max_restarts", 0, 1000000, "an integer in [0, 1000000]")) {
    e.max_restarts = *v;
  }
  if (auto v = r.get_int(m, "elastic.snapshot_every_steps", 1, kMaxInt, "a positive integer")) {
    e.snapshot_every_steps = *v;
  }
  if (e.min_or(c.workers) > c.workers) {
    r.fail("elastic.min_workers", YamlReader::child(m, "elastic.min_workers"),
           "is " + std::to_string(e.min_workers) + ", more than workers (" +
               std::to_string(c.workers) + ")");
  }
  if (e.max_or(c.workers) < c.workers) {
    r.fail("elastic.max_workers", YamlReader::child(m, "elastic.max_workers"),
           "is " + std::to_string(e.max_workers) + ", fewer than workers (" +
               std::to_string(c.workers) + ")");
  }
  if (e.failure_timeout_s <= e.heartbeat_s) {
    r.fail("elastic.failure_timeout_s", YamlReader::child(m, "elastic.failure_timeout_s"),
           "must be longer than elastic.heartbeat_s (" + yaml_number(e.heartbeat_s) +
               " s), or every worker is declared lost between two heartbeats");
  }
  if (!wait) e.coordinator_wait_s = std::max(e.coordinator_wait_s, e.failure_timeout_s);
  if (e.coordinator_wait_s < e.failure_timeout_s) {
    r.fail("elastic.coordinator_wait_s", YamlReader::child(m, "elastic.coordinator_wait_s"),
           "must be at least elastic.failure_timeout_s (" + yaml_number(e.failure_timeout_s) +
               " s): a worker gives up on its coordinator no sooner than the coordinator gives up "
               "on it");
  }
}

// comm.compression and the options of the chosen codec; another codec's section is an error.
void read_compression(const YamlReader& r, const YAML::Node& comm, CommConfig& c) {
  if (auto s = r.get_choice(comm, "comm.compression", kCompressions)) c.compression = *s;
  if (auto v = r.get_number(comm, "comm.compression_min_kb", 0, false, 1 << 20, false,
                            "a number of KiB in [0, 1048576]")) {
    c.compression_min_kb = *v;
  }
  if (auto v = r.get_bool(comm, "comm.error_feedback")) c.error_feedback = *v;
  for (const char* codec : {"int8", "topk", "powersgd"}) {
    if (c.compression != codec) {
      reject_if_present(r, comm, std::string("comm.") + codec,
                        "when comm.compression is " + c.compression);
    }
  }
  YAML::Node int8 = r.section(comm, "comm.int8");
  if (auto v = r.get_int(int8, "comm.int8.chunk", 1, 1 << 20, "an integer in [1, 1048576]")) {
    c.int8_chunk = *v;
  }
  if (auto v = r.get_bool(int8, "comm.int8.stochastic_rounding")) c.int8_stochastic_rounding = *v;
  YAML::Node topk = r.section(comm, "comm.topk");
  if (auto v = r.get_number(topk, "comm.topk.ratio", 0, true, 1, false, "a number in (0, 1]")) {
    c.topk_ratio = *v;
  }
  if (auto v = r.get_int(topk, "comm.topk.warmup_steps", 0, kMaxInt, "a non-negative integer")) {
    c.topk_warmup_steps = *v;
  }
  YAML::Node psgd = r.section(comm, "comm.powersgd");
  if (auto v = r.get_int(psgd, "comm.powersgd.rank", 1, 1024, "an integer in [1, 1024]")) {
    c.powersgd_rank = *v;
  }
  if (auto v =
          r.get_int(psgd, "comm.powersgd.warmup_steps", 0, kMaxInt, "a non-negative integer")) {
    c.powersgd_warmup_steps = *v;
  }
}

// A `dashboard:` section (even an empty one) turns the console on unless it says enabled: false.
void read_dashboard(const YamlReader& r, const YAML::Node& root, DashboardConfig& d) {
  if (!YamlReader::child(root, "dashboard").IsDefined()) return;
  YAML::Node m = r.section(root, "dashboard");
  d.enabled = true;
  if (auto v = r.get_bool(m, "dashboard.enabled")) d.enabled = *v;
  if (auto s = r.get_string(m, "dashboard.bind")) {
    if (s->empty())
      r.fail("dashboard.bind", YamlReader::child(m, "dashboard.bind"), "must not be empty");
    d.bind = *s;
  }
  if (auto v = r.get_int(m, "dashboard.port", 0, 65535, "a port number in [0, 65535]")) d.port = *v;
}

void read_debug(const YamlReader& r, const YAML::Node& root, DebugConfig& d) {
  YAML::Node m = r.section(root, "debug");
  if (auto v = r.get_bool(m, "debug.check_collectives")) d.check_collectives = *v;
  if (auto v = r.get_int(m, "debug.check_params_every", 0, kMaxInt, "a non-negative integer")) {
    d.check_params_every = *v;
  }
  if (auto v = r.get_number(m, "debug.hang_timeout_s", 0, false, 86400, false,
                            "a number of seconds in [0, 86400] (0: off)")) {
    d.hang_timeout_s = *v;
  }
  if (auto v =
          r.get_int(m, "debug.flight_recorder_entries", 1, 1 << 20, "an integer in [1, 1048576]")) {
    d.flight_recorder_entries = *v;
  }
  if (auto v = r.get_number(m, "debug.straggler_margin", 0, true, 100, false,
                            "a number in (0, 100] (0.25: 25% over the others' median)")) {
    d.straggler_margin = *v;
  }
  if (auto v = r.get_int(m, "debug.straggler_window", 1, 1000000, "an integer in [1, 1000000]")) {
    d.straggler_window = *v;
  }
  if (auto v = r.get_number(m, "debug.bandwidth_probe_mb", 0, false, 256, false,
                            "a number of MB in [0, 256] (0: no probe)")) {
    d.bandwidth_probe_mb = *v;
  }
}

void read_program(const YamlReader& r, const YAML::Node& root, const LoadOptions& opt,
                  ProgramConfig& p) {
  const YAML::Node given = YamlReader::child(root, "program");
  if (!given.IsDefined() || given.IsNull()) return;
  YAML::Node program = r.section(root, "program");
  auto script = r.get_string(program, "program.python");
  if (!script || script->empty()) {
    r.fail("program", program, "a program needs the Python script to run (program.python)");
  }
  struct stat st {};
  if (opt.check_paths && (::stat(script->c_str(), &st) != 0 || !S_ISREG(st.st_mode))) {
    r.fail("program.python", YamlReader::child(program, "program.python"),
           "no such script: " + *script);
  }
  p.python = *script;
  if (auto s = r.get_string(program, "program.interpreter")) {
    if (s->empty()) {
      r.fail("program.interpreter", YamlReader::child(program, "program.interpreter"),
             "expected the path of a Python interpreter, got an empty string");
    }
    p.interpreter = *s;
  }
  YAML::Node args = YamlReader::child(program, "program.args");
  if (!args.IsDefined() || args.IsNull()) return;
  if (!args.IsSequence()) {
    r.fail("program.args", args,
           "expected a list of the script's arguments, got " + YamlReader::describe(args));
  }
  for (size_t i = 0; i < args.size(); ++i) {
    // Every argument reaches the script as text: `[--epochs, 3]` passes "3".
    if (!args[i].IsScalar()) {
      r.fail("program.args[" + std::to_string(i) + "]", args[i],
             "expected a string or a number, got " + YamlReader::describe(args[i]));
    }
    p.args.push_back(args[i].Scalar());
  }
}

JobConfig read_job(const YamlReader& r, const LoadOptions& opt) {
  JobConfig c;
  const YAML::Node& doc = r.root();
  if (doc.IsDefined() && !doc.IsNull() && !doc.IsMap()) {
    r.fail("", doc, "a job file is a map of keys, got " + YamlReader::describe(doc));
  }
  YAML::Node root = r.section(doc, "");
  if (auto s = r.get_string(root, "name")) {
    bool ok = !s->empty() && s->size() <= 64;
    for (char ch : *s) {
      ok = ok &&
           (std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.');
    }
    if (!ok) {
      r.fail("name", YamlReader::child(root, "name"),
             "expected 1 to 64 letters, digits, '-', '_' or '.', got " +
                 YamlReader::describe(YamlReader::child(root, "name")));
    }
    c.name = *s;
  }
  if (auto v = r.get_int(root, "workers", 1, 4096, "an integer in [1, 4096]")) c.workers = *v;
  if (auto v = r.get_int(root, "threads_per_worker", 1, 256, "an integer in [1, 256]")) {
    c.threads_per_worker = *v;
  }
  YAML::Node model = r.section(root, "model");
  if (auto s = r.get_choice(model, "model.name", names(kModels, model_kind_name))) {
    c.model.name = parse_enum(*s, kModels, model_kind_name);
  }
  if (auto s =
          r.get_choice(model, "model.memory_format", names(kMemoryFormats, memory_format_name))) {
    c.model.memory_format = parse_enum(*s, kMemoryFormats, memory_format_name);
  }
  read_data(r, root, opt, c.data);
  if (c.model.name == ModelKind::Cnn && (c.data.shape[1] < 4 || c.data.shape[2] < 4)) {
    // Two 2x2 max-pools need at least 4x4 pixels.
    YAML::Node shape = YamlReader::child(YamlReader::child(root, "data"), "data.shape");
    r.fail("data.shape", shape, "model cnn needs images of at least 4x4 pixels");
  }
  read_train(r, root, c.train);

  YAML::Node comm = r.section(root, "comm");
  if (auto s = r.get_choice(comm, "comm.algorithm", kAlgorithms)) c.comm.algorithm = *s;
  if (auto s = r.get_choice(comm, "comm.transport", kTransports)) c.comm.transport = *s;
  if (auto s = r.get_choice(comm, "comm.integrity", kIntegrities)) c.comm.integrity = *s;
  if (auto v =
          r.get_number(comm, "comm.bucket_mb", 0, true, 4096, false, "a number in (0, 4096]")) {
    c.comm.bucket_mb = *v;
  }
  if (auto s = r.get_choice(comm, "comm.buffers", kBufferSyncs)) c.comm.buffers = *s;
  if (auto v = r.get_number(comm, "comm.timeout_s", 0, true, 86400, false,
                            "a number of seconds in (0, 86400]")) {
    c.comm.timeout_s = *v;
  }
  read_compression(r, comm, c.comm);
  read_sync(r, root, c);
  YAML::Node ckpt = r.section(root, "checkpoint");
  if (auto v = r.get_int(ckpt, "checkpoint.every_steps", 0, kMaxInt, "a non-negative integer")) {
    c.checkpoint.every_steps = *v;
  }
  if (auto v = r.get_int(ckpt, "checkpoint.keep", 1, 1000, "an integer in [1, 1000]")) {
    c.checkpoint.keep = *v;
  }
  read_elastic(r, root, c);
  read_dashboard(r, root, c.dashboard);
  YAML::Node coord = r.section(root, "coordinator");
  if (auto s = r.get_string(coord, "coordinator.store")) {
    try {
      store::EtcdAddress::parse(*s);
    } catch (const ConfigError& e) {
      r.fail("coordinator.store", YamlReader::child(coord, "coordinator.store"), e.what());
    }
    c.coordinator.store = *s;
  }
  if (auto s = r.get_choice(coord, "coordinator.standby", {"workers", "none"})) {
    c.coordinator.standby = *s;
  }
  read_faults(r, root, c.workers, c.faults);
  read_debug(r, root, c.debug);
  YAML::Node trace = r.section(root, "trace");
  if (auto v = r.get_bool(trace, "trace.enabled")) c.trace.enabled = *v;
  if (auto v = r.get_int(trace, "trace.max_pending_events", 1000, int64_t{1} << 30,
                         "an integer in [1000, 2^30]")) {
    c.trace.max_pending_events = *v;
  }
  read_program(r, root, opt, c.program);
  if (!c.program.python.empty() && c.sync.mode != SyncKind::AllReduce) {
    r.fail("sync.mode", YamlReader::child(YamlReader::child(root, "sync"), "sync.mode"),
           "does not apply to a Python program (program.python): the script's own training "
           "loop decides how its replicas synchronise");
  }
  return c;
}

}  // namespace

std::string_view model_kind_name(ModelKind k) {
  switch (k) {
    case ModelKind::Mlp:
      return "mlp";
    case ModelKind::Cnn:
      return "cnn";
    case ModelKind::ResNet:
      return "resnet";
  }
  return "?";
}

std::string_view memory_format_name(MemoryFormat f) {
  switch (f) {
    case MemoryFormat::Auto:
      return "auto";
    case MemoryFormat::ChannelsLast:
      return "channels_last";
    case MemoryFormat::Contiguous:
      return "contiguous";
  }
  return "?";
}

std::string_view dataset_kind_name(DatasetKind k) {
  switch (k) {
    case DatasetKind::FashionMnist:
      return "fashion-mnist";
    case DatasetKind::Mnist:
      return "mnist";
    case DatasetKind::Synthetic:
      return "synthetic";
  }
  return "?";
}

std::string_view fault_kind_name(FaultKind k) {
  switch (k) {
    case FaultKind::Kill:
      return "kill";
    case FaultKind::Hang:
      return "hang";
    case FaultKind::Slow:
      return "slow";
    case FaultKind::Disconnect:
      return "disconnect";
    case FaultKind::Stragglers:
      return "stragglers";
  }
  return "?";
}

std::string_view sync_kind_name(SyncKind k) {
  switch (k) {
    case SyncKind::AllReduce:
      return "allreduce";
    case SyncKind::LocalSgd:
      return "local_sgd";
    case SyncKind::Ssp:
      return "ssp";
    case SyncKind::Async:
      return "async";
  }
  return "?";
}

std::string_view lr_scale_name(LrScale s) {
  return s == LrScale::InverseStaleness ? "inverse_staleness" : "none";
}

std::string_view outer_optimizer_name(OuterOptimizerKind k) {
  switch (k) {
    case OuterOptimizerKind::None:
      return "none";
    case OuterOptimizerKind::Sgd:
      return "sgd";
    case OuterOptimizerKind::Nesterov:
      return "nesterov";
  }
  return "?";
}

std::string_view optimizer_kind_name(OptimizerKind k) {
  return k == OptimizerKind::Adam ? "adam" : "sgd";
}

std::string_view lr_scaling_name(LrScaling s) {
  return s == LrScaling::Linear ? "linear" : "none";
}

JobConfig parse_job_config(std::string_view yaml, const std::string& source,
                           const LoadOptions& options) {
  YamlReader reader(yaml, source, &schema());
  for (const auto& o : options.overrides) reader.apply_override(o);
  return read_job(reader, options);
}

JobConfig load_job_config(const std::string& path, const LoadOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path + ": cannot open the job file");
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ConfigError(path + ": cannot read the job file");
  return parse_job_config(text.str(), path, options);
}

InputSpec input_spec(const DataConfig& data) {
  if (data.name == DatasetKind::Synthetic) return {.shape = data.shape, .classes = data.classes};
  return {.shape = {1, 28, 28}, .classes = 10};
}

}  // namespace cohort::train
