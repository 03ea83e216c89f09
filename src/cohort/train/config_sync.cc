// The job file's sync section (and parameter_servers): config.h, "sync".
#include "cohort/train/config_reading.h"

namespace cohort::train::config_detail {
namespace {

constexpr auto kSyncKinds = {SyncKind::AllReduce, SyncKind::LocalSgd, SyncKind::Ssp,
                             SyncKind::Async};
constexpr auto kOuterOptimizers = {OuterOptimizerKind::None, OuterOptimizerKind::Sgd,
                                   OuterOptimizerKind::Nesterov};
constexpr auto kLrScales = {LrScale::None, LrScale::InverseStaleness};

void read_outer_optimizer(const YamlReader& r, const YAML::Node& m, SyncConfig& s) {
  YAML::Node o = r.section(m, "sync.outer_optimizer");
  OuterOptimizerConfig& outer = s.outer_optimizer;
  if (auto v = r.get_choice(o, "sync.outer_optimizer.name",
                            names(kOuterOptimizers, outer_optimizer_name))) {
    outer.name = parse_enum(*v, kOuterOptimizers, outer_optimizer_name);
  }
  if (outer.name == OuterOptimizerKind::None) {
    for (const char* key : {"sync.outer_optimizer.lr", "sync.outer_optimizer.momentum"}) {
      reject_if_present(r, o, key, "when sync.outer_optimizer.name is none");
    }
    return;
  }
  if (auto v =
          r.get_number(o, "sync.outer_optimizer.lr", 0, true, 100, false, "a number in (0, 100]")) {
    outer.lr = *v;
  }
  if (auto v = r.get_number(o, "sync.outer_optimizer.momentum", 0, false, 1, true,
                            "a number in [0, 1)")) {
    outer.momentum = *v;
  }
}

// ssp and async: the parameter servers, the staleness bound and its correction.
void read_servers(const YamlReader& r, const YAML::Node& root, const YAML::Node& m, JobConfig& c) {
  SyncConfig& s = c.sync;
  const std::string mode(sync_kind_name(s.mode));
  auto servers = r.get_int(root, "parameter_servers", 1, 256, "an integer in [1, 256]");
  if (!servers) {
    r.fail("sync.mode", YamlReader::child(m, "sync.mode"),
           "is " + mode +
               ": the job needs parameter_servers (how many server processes hold "
               "the model; 1 keeps no copy of it, 2 or more survive the loss of one)");
  }
  c.parameter_servers = *servers;
  if (s.mode == SyncKind::Ssp) {
    if (auto v = r.get_int(m, "sync.staleness", 0, 1 << 20, "an integer in [0, 1048576]")) {
      s.staleness = *v;
    }
    if (auto v = r.get_number(m, "sync.fresh_wait", 0, false, 1, false,
                              "a number in [0, 1] (a share of a step's time; 0: off)")) {
      s.fresh_wait = *v;
    }
    if (auto v = r.get_bool(m, "sync.read_my_writes")) s.read_my_writes = *v;
  } else {
    reject_if_present(r, m, "sync.staleness", "when sync.mode is async (staleness is unbounded)");
    reject_if_present(r, m, "sync.fresh_wait", "when sync.mode is async (it never waits)");
    reject_if_present(r, m, "sync.read_my_writes",
                      "when sync.mode is async (a push is applied before its pull is answered)");
  }
  if (auto v = r.get_choice(m, "sync.lr_scale", names(kLrScales, lr_scale_name))) {
    s.lr_scale = parse_enum(*v, kLrScales, lr_scale_name);
  }
  if (auto v = r.get_number(m, "sync.delay_compensation", 0, false, 100, false,
                            "a number in [0, 100] (lambda of DC-ASGD; 0: off)")) {
    s.delay_compensation = *v;
  }
  if (s.lr_scale != LrScale::None && s.delay_compensation > 0) {
    r.fail("sync.delay_compensation", YamlReader::child(m, "sync.delay_compensation"),
           "and sync.lr_scale: inverse_staleness are two corrections of the same staleness; "
           "choose one");
  }
  YAML::Node comm = YamlReader::child(root, "comm");
  if (c.comm.compression != "none") {
    r.fail("comm.compression", YamlReader::child(comm, "comm.compression"),
           "does not apply when sync.mode is " + mode +
               " (pushes go to the parameter servers uncompressed)");
  }
}

}  // namespace

void read_sync(const YamlReader& r, const YAML::Node& root, JobConfig& c) {
  SyncConfig& s = c.sync;
  YAML::Node m = r.section(root, "sync");
  if (auto v = r.get_choice(m, "sync.mode", names(kSyncKinds, sync_kind_name))) {
    s.mode = parse_enum(*v, kSyncKinds, sync_kind_name);
  }
  const std::string when = "when sync.mode is " + std::string(sync_kind_name(s.mode));
  const bool servers = s.mode == SyncKind::Ssp || s.mode == SyncKind::Async;
  if (auto v = r.get_choice(m, "sync.balance", {"off", "auto"})) {
    if (servers && *v == "auto") {
      r.fail("sync.balance", YamlReader::child(m, "sync.balance"),
             "does not apply " + when +
                 ": a worker's pushes never wait for the others' beyond "
                 "the staleness bound, so its share of the data need not shrink");
    }
    s.balance = *v == "auto";
  }
  if (s.mode != SyncKind::LocalSgd) {
    for (const char* key : {"sync.period", "sync.warmup_steps", "sync.outer_optimizer"}) {
      reject_if_present(r, m, key, when + " (only to local_sgd)");
    }
  }
  if (!servers) {
    for (const char* key :
         {"sync.staleness", "sync.fresh_wait", "sync.lr_scale", "sync.delay_compensation"}) {
      reject_if_present(r, m, key, when + " (only to ssp and async)");
    }
    reject_if_present(r, m, "sync.read_my_writes", when + " (only to ssp)");
    reject_if_present(r, root, "parameter_servers", when + " (only to ssp and async)");
  }
  if (servers) return read_servers(r, root, m, c);
  if (s.mode != SyncKind::LocalSgd) return;
  if (auto v = r.get_int(m, "sync.period", 1, 1 << 20, "an integer in [1, 1048576]")) {
    s.period = *v;
  }
  if (auto v = r.get_int(m, "sync.warmup_steps", 0, kMaxInt, "a non-negative integer")) {
    s.warmup_steps = *v;
  }
  read_outer_optimizer(r, m, s);
}

}  // namespace cohort::train::config_detail
