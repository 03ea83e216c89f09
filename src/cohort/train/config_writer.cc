// The resolved job configuration written back as YAML (config.h: to_yaml).
#include "cohort/base/yaml_reader.h"
#include "cohort/train/config.h"

namespace cohort::train {

std::string to_yaml(const JobConfig& c) {
  YAML::Emitter out;
  auto num = [&](const char* key, double v) {
    out << YAML::Key << key << YAML::Value << yaml_number(v);
  };
  out << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << c.name;
  out << YAML::Key << "workers" << YAML::Value << c.workers;
  if (c.sync.uses_servers()) {
    out << YAML::Key << "parameter_servers" << YAML::Value << c.parameter_servers;
  }
  out << YAML::Key << "threads_per_worker" << YAML::Value << c.threads_per_worker;
  out << YAML::Key << "model" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << std::string(model_kind_name(c.model.name));
  out << YAML::Key << "memory_format" << YAML::Value
      << std::string(memory_format_name(c.model.memory_format));
  out << YAML::EndMap;

  out << YAML::Key << "data" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << std::string(dataset_kind_name(c.data.name));
  if (c.data.name == DatasetKind::Synthetic) {
    out << YAML::Key << "samples" << YAML::Value << c.data.samples;
    out << YAML::Key << "shape" << YAML::Value << YAML::Flow << c.data.shape;
    out << YAML::Key << "classes" << YAML::Value << c.data.classes;
  } else {
    out << YAML::Key << "path" << YAML::Value << YAML::DoubleQuoted << c.data.path;
  }
  out << YAML::EndMap;

  const TrainConfig& t = c.train;
  out << YAML::Key << "train" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "epochs" << YAML::Value << t.epochs;
  out << YAML::Key << "max_steps" << YAML::Value << t.max_steps;
  out << YAML::Key << "batch_size" << YAML::Value << t.batch_size;
  out << YAML::Key << "seed" << YAML::Value << t.seed;
  out << YAML::Key << "log_every_steps" << YAML::Value << t.log_every_steps;
  out << YAML::Key << "drop_last" << YAML::Value << (t.drop_last ? "true" : "false");
  out << YAML::Key << "eval_every_steps" << YAML::Value << t.eval_every_steps;
  num("stop_at_accuracy", t.stop_at_accuracy);
  out << YAML::Key << "optimizer" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << std::string(optimizer_kind_name(t.optimizer.name));
  num("lr", t.optimizer.lr);
  if (t.optimizer.name == OptimizerKind::Sgd) num("momentum", t.optimizer.momentum);
  num("weight_decay", t.optimizer.weight_decay);
  if (t.optimizer.name == OptimizerKind::Adam) {
    out << YAML::Key << "betas" << YAML::Value << YAML::Flow << YAML::BeginSeq
        << yaml_number(t.optimizer.betas[0]) << yaml_number(t.optimizer.betas[1]) << YAML::EndSeq;
    num("eps", t.optimizer.eps);
  }
  out << YAML::EndMap;
  out << YAML::Key << "lr_schedule" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "warmup_steps" << YAML::Value << t.lr_schedule.warmup_steps;
  out << YAML::Key << "scaling" << YAML::Value
      << std::string(lr_scaling_name(t.lr_schedule.scaling));
  out << YAML::EndMap << YAML::EndMap;

  out << YAML::Key << "comm" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "algorithm" << YAML::Value << c.comm.algorithm;
  out << YAML::Key << "transport" << YAML::Value << c.comm.transport;
  out << YAML::Key << "integrity" << YAML::Value << c.comm.integrity;
  num("bucket_mb", c.comm.bucket_mb);
  out << YAML::Key << "buffers" << YAML::Value << c.comm.buffers;
  num("timeout_s", c.comm.timeout_s);
  out << YAML::Key << "compression" << YAML::Value << c.comm.compression;
  num("compression_min_kb", c.comm.compression_min_kb);
  out << YAML::Key << "error_feedback" << YAML::Value << (c.comm.error_feedback ? "true" : "false");
  if (c.comm.compression == "int8") {
    out << YAML::Key << "int8" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "chunk" << YAML::Value << c.comm.int8_chunk;
    out << YAML::Key << "stochastic_rounding" << YAML::Value
        << (c.comm.int8_stochastic_rounding ? "true" : "false");
    out << YAML::EndMap;
  } else if (c.comm.compression == "topk") {
    out << YAML::Key << "topk" << YAML::Value << YAML::BeginMap;
    num("ratio", c.comm.topk_ratio);
    out << YAML::Key << "warmup_steps" << YAML::Value << c.comm.topk_warmup_steps;
    out << YAML::EndMap;
  } else if (c.comm.compression == "powersgd") {
    out << YAML::Key << "powersgd" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "rank" << YAML::Value << c.comm.powersgd_rank;
    out << YAML::Key << "warmup_steps" << YAML::Value << c.comm.powersgd_warmup_steps;
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
  out << YAML::Key << "sync" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "mode" << YAML::Value << std::string(sync_kind_name(c.sync.mode));
  out << YAML::Key << "balance" << YAML::Value << (c.sync.balance ? "auto" : "off");
  if (c.sync.mode == SyncKind::LocalSgd) {
    out << YAML::Key << "period" << YAML::Value << c.sync.period;
    out << YAML::Key << "warmup_steps" << YAML::Value << c.sync.warmup_steps;
    const OuterOptimizerConfig& o = c.sync.outer_optimizer;
    out << YAML::Key << "outer_optimizer" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "name" << YAML::Value << std::string(outer_optimizer_name(o.name));
    if (o.name != OuterOptimizerKind::None) {
      num("lr", o.lr);
      num("momentum", o.momentum);
    }
    out << YAML::EndMap;
  }
  if (c.sync.uses_servers()) {
    if (c.sync.mode == SyncKind::Ssp) {
      out << YAML::Key << "staleness" << YAML::Value << c.sync.staleness;
      num("fresh_wait", c.sync.fresh_wait);
      out << YAML::Key << "read_my_writes" << YAML::Value << c.sync.read_my_writes;
    }
    out << YAML::Key << "lr_scale" << YAML::Value << std::string(lr_scale_name(c.sync.lr_scale));
    num("delay_compensation", c.sync.delay_compensation);
  }
  out << YAML::EndMap;
  out << YAML::Key << "checkpoint" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "every_steps" << YAML::Value << c.checkpoint.every_steps;
  out << YAML::Key << "keep" << YAML::Value << c.checkpoint.keep;
  out << YAML::EndMap;
  const ElasticConfig& e = c.elastic;
  out << YAML::Key << "elastic" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "min_workers" << YAML::Value << e.min_workers;
  out << YAML::Key << "max_workers" << YAML::Value << e.max_workers;
  num("heartbeat_s", e.heartbeat_s);
  num("failure_timeout_s", e.failure_timeout_s);
  out << YAML::Key << "max_restarts" << YAML::Value << e.max_restarts;
  out << YAML::Key << "snapshot_every_steps" << YAML::Value << e.snapshot_every_steps;
  num("join_timeout_s", e.join_timeout_s);
  num("coordinator_wait_s", e.coordinator_wait_s);
  out << YAML::EndMap;
  if (c.dashboard != DashboardConfig{}) {
    out << YAML::Key << "dashboard" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "enabled" << YAML::Value << (c.dashboard.enabled ? "true" : "false");
    out << YAML::Key << "bind" << YAML::Value << c.dashboard.bind;
    out << YAML::Key << "port" << YAML::Value << c.dashboard.port;
    out << YAML::EndMap;
  }
  if (c.coordinator != CoordinatorConfig{}) {
    out << YAML::Key << "coordinator" << YAML::Value << YAML::BeginMap;
    if (!c.coordinator.store.empty())
      out << YAML::Key << "store" << YAML::Value << c.coordinator.store;
    out << YAML::Key << "standby" << YAML::Value << c.coordinator.standby;
    out << YAML::EndMap;
  }
  out << YAML::Key << "faults" << YAML::Value << YAML::BeginSeq;
  for (const FaultConfig& f : c.faults) {
    out << YAML::Flow << YAML::BeginMap;
    out << YAML::Key << "kind" << YAML::Value << std::string(fault_kind_name(f.kind));
    if (f.kind != FaultKind::Stragglers) out << YAML::Key << "rank" << YAML::Value << f.rank;
    out << YAML::Key << "at_step" << YAML::Value << f.at_step;
    if (f.kind == FaultKind::Hang || (f.kind == FaultKind::Slow && f.factor == 0)) {
      num("seconds", f.seconds);
    }
    if (f.factor > 0) num("factor", f.factor);
    if (f.kind == FaultKind::Stragglers) out << YAML::Key << "every" << YAML::Value << f.every;
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
  out << YAML::Key << "debug" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "check_collectives" << YAML::Value
      << (c.debug.check_collectives ? "true" : "false");
  out << YAML::Key << "check_params_every" << YAML::Value << c.debug.check_params_every;
  num("hang_timeout_s", c.debug.hang_timeout_s);
  out << YAML::Key << "flight_recorder_entries" << YAML::Value << c.debug.flight_recorder_entries;
  num("straggler_margin", c.debug.straggler_margin);
  out << YAML::Key << "straggler_window" << YAML::Value << c.debug.straggler_window;
  num("bandwidth_probe_mb", c.debug.bandwidth_probe_mb);
  out << YAML::EndMap;
  out << YAML::Key << "trace" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "enabled" << YAML::Value << (c.trace.enabled ? "true" : "false");
  out << YAML::Key << "max_pending_events" << YAML::Value << c.trace.max_pending_events;
  out << YAML::EndMap;
  if (!c.program.python.empty()) {
    out << YAML::Key << "program" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "python" << YAML::Value << YAML::DoubleQuoted << c.program.python;
    out << YAML::Key << "args" << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (const auto& a : c.program.args) out << YAML::DoubleQuoted << a;
    out << YAML::EndSeq;
    out << YAML::Key << "interpreter" << YAML::Value << YAML::DoubleQuoted << c.program.interpreter;
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace cohort::train
