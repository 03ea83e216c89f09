// `cohort k8s JOB.yaml --image IMAGE`: the Kubernetes manifests that run a job on a cluster.
//
//   Secret       <name>-token          the job token (a file in the pods, mode 0400, never in a
//                                      pod's plain fields)
//   ConfigMap    <name>-job            the resolved job file
//   Service      <name>-coordinator    where the workers reach the coordinator
//   Service      <name>-workers        headless: a DNS name for each worker pod
//   Job          <name>-coordinator    `cohort run --external-workers`: the coordinator, which
//                                      ends when the training job does
//   Job          <name>-standby        with coordinator.store (etcd): `cohort run --standby`, a
//                                      second coordinator that takes the job over when the first
//                                      is gone. The job's keys are under PREFIX/<name>-<random>
//                                      (--run-id), which the workers join.
//   Job          <name>-workers        an Indexed Job of `workers` pods, `cohort worker --join`;
//                                      the rank is the completion index (JOB_COMPLETION_INDEX). A
//                                      pod that fails is started again under its index, up to
//                                      elastic.max_restarts in all, and joins as a replacement
//                                      (elastic/rank_claim.h).
//   Job          <name>-servers        with sync.mode ssp or async: an Indexed Job of
//                                      `parameter_servers` pods, `cohort ps-server --index I`
//                                      (I the completion index). A server pod that fails is
//                                      started again under its index and backs the shards left
//                                      without a copy (ps/server.h).
// Worker pods request `threads_per_worker` CPUs and get a memory-backed /dev/shm large enough for
// the shared-memory transport's rings.
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "cohort/base/base64.h"
#include "cohort/base/checksum.h"
#include "cohort/base/error.h"
#include "cohort/base/file.h"
#include "cohort/base/secret.h"
#include "cohort/cli/args.h"
#include "cohort/cli/ps_fleet.h"
#include "cohort/train/config.h"
#include "yaml-cpp/yaml.h"

namespace cohort::cli {
namespace {

using ojson = nlohmann::ordered_json;

constexpr int kCoordinatorPort = 29400;
constexpr const char* kTokenDir = "/var/run/secrets/cohort";
constexpr const char* kJobDir = "/etc/cohort";

int usage(std::ostream& os, int code) {
  os << "usage: cohort k8s JOB.yaml --image IMAGE [--set key=value]... [--name NAME]\n"
        "                 [--namespace NS] [--token-file F] [--out FILE]\n\n"
        "Writes the Kubernetes manifests that run the job (1.24 or later: an Indexed Job of\n"
        "workers, one of parameter servers where sync.mode has them, a coordinator (and a\n"
        "standby coordinator where coordinator.store is etcd), their\n"
        "Services, the job file as a ConfigMap and the token as a Secret) to FILE (mode 0600: it "
        "holds the token) or stdout. The image is one built with\n"
        "examples/k8s/Dockerfile. The token is read from --token-file, or made. Apply with\n"
        "`kubectl apply -f FILE`; docs/clusters.md.\n";
  return code;
}

// A Kubernetes name: lower-case letters, digits and '-', starting and ending with a letter or
// digit, at most 40 characters (room for the suffixes below within DNS's 63).
std::string k8s_name(const std::string& name) {
  std::string out;
  for (char c : name) {
    const char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out += (std::isalnum(static_cast<unsigned char>(l)) ? l : '-');
  }
  while (!out.empty() && out.front() == '-') out.erase(out.begin());
  if (out.size() > 40) out.resize(40);
  while (!out.empty() && out.back() == '-') out.pop_back();
  if (out.empty()) throw ConfigError("--name: '" + name + "' has no letter or digit");
  return out;
}

ojson labels(const std::string& job, const std::string& role) {
  return {{"app.kubernetes.io/name", "cohort"},
          {"app.kubernetes.io/instance", job},
          {"app.kubernetes.io/component", role}};
}

ojson metadata(const std::string& name, const std::string& ns, const std::string& job,
               const std::string& role) {
  ojson m = {{"name", name}};
  if (!ns.empty()) m["namespace"] = ns;
  m["labels"] = labels(job, role);
  return m;
}

// What every pod of the job mounts: the token (0400, as --token-file requires) and the job file.
ojson token_volume(const std::string& job) {
  return {{"name", "token"}, {"secret", {{"secretName", job + "-token"}, {"defaultMode", 0400}}}};
}
ojson token_mount() {
  return {{"name", "token"}, {"mountPath", kTokenDir}, {"readOnly", true}};
}

// The pod's own address, for --bind $(POD_IP).
ojson pod_ip_env() {
  return {{"name", "POD_IP"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "status.podIP"}}}}}};
}

// The request and limit of a pod's CPUs: the job's threads per worker.
ojson resources(long cpus, const std::string& memory) {
  return {{"requests", {{"cpu", std::to_string(cpus)}, {"memory", memory}}},
          {"limits", {{"cpu", std::to_string(cpus)}}}};
}

struct Manifests {
  const train::JobConfig& cfg;
  std::string job;  // the Kubernetes name prefix
  std::string ns;
  std::string image;
  std::string token;
  std::string run_id;  // with coordinator.store: where under its prefix the job's keys go

  std::vector<ojson> all() const {
    std::vector<ojson> docs = {secret(),          config_map(),  coordinator_service(),
                               workers_service(), coordinator(), workers()};
    if (cfg.sync.uses_servers()) docs.push_back(servers());
    if (!run_id.empty()) docs.push_back(standby());
    return docs;
  }

  std::string join() const {
    if (!run_id.empty()) return cfg.coordinator.store + "/" + run_id;
    return job + "-coordinator:" + std::to_string(kCoordinatorPort);
  }

  std::vector<std::string> coordinator_command() const {
    std::vector<std::string> c = {"cohort",
                                  "run",
                                  std::string(kJobDir) + "/job.yaml",
                                  "--external-workers",
                                  "--bind",
                                  "0.0.0.0",
                                  "--port",
                                  std::to_string(kCoordinatorPort),
                                  "--token-file",
                                  std::string(kTokenDir) + "/token",
                                  "--run-dir",
                                  "/var/lib/cohort/run"};
    if (!run_id.empty()) c.insert(c.end(), {"--run-id", run_id});
    return c;
  }

  ojson secret() const {
    return {{"apiVersion", "v1"},
            {"kind", "Secret"},
            {"metadata", metadata(job + "-token", ns, job, "token")},
            {"type", "Opaque"},
            {"data", {{"token", base64_encode(token)}}}};
  }

  ojson config_map() const {
    return {{"apiVersion", "v1"},
            {"kind", "ConfigMap"},
            {"metadata", metadata(job + "-job", ns, job, "config")},
            {"data", {{"job.yaml", train::to_yaml(cfg)}}}};
  }

  ojson coordinator_service() const {
    ojson ports = ojson::array(
        {{{"name", "coordinator"}, {"port", kCoordinatorPort}, {"targetPort", kCoordinatorPort}}});
    if (cfg.dashboard.enabled && cfg.dashboard.port > 0) {
      ports.push_back(
          {{"name", "console"}, {"port", cfg.dashboard.port}, {"targetPort", cfg.dashboard.port}});
    }
    return {{"apiVersion", "v1"},
            {"kind", "Service"},
            {"metadata", metadata(job + "-coordinator", ns, job, "coordinator")},
            {"spec", {{"selector", labels(job, "coordinator")}, {"ports", ports}}}};
  }

  // Headless: each worker pod gets a DNS name (<pod>.<job>-workers), before it is ready.
  ojson workers_service() const {
    return {{"apiVersion", "v1"},
            {"kind", "Service"},
            {"metadata", metadata(job + "-workers", ns, job, "worker")},
            {"spec",
             {{"clusterIP", "None"},
              {"publishNotReadyAddresses", true},
              {"selector", labels(job, "worker")}}}};
  }

  ojson coordinator() const {
    ojson container = {{"name", "coordinator"},
                       {"image", image},
                       {"command", coordinator_command()},
                       {"ports", {{{"name", "coordinator"}, {"containerPort", kCoordinatorPort}}}},
                       {"resources", resources(1, "512Mi")},
                       {"volumeMounts",
                        {token_mount(),
                         {{"name", "job"}, {"mountPath", kJobDir}, {"readOnly", true}},
                         {{"name", "run"}, {"mountPath", "/var/lib/cohort"}}}}};
    return single_pod_job("coordinator", container,
                          {token_volume(job),
                           {{"name", "job"}, {"configMap", {{"name", job + "-job"}}}},
                           {{"name", "run"}, {"emptyDir", ojson::object()}}});
  }

  // A Job of one pod that is not started again (a coordinator's second instance is its standby,
  // not a restart): <job>-<role>, labelled with the role.
  ojson single_pod_job(const std::string& role, const ojson& container, ojson volumes) const {
    return {{"apiVersion", "batch/v1"},
            {"kind", "Job"},
            {"metadata", metadata(job + "-" + role, ns, job, role)},
            {"spec",
             {{"backoffLimit", 0},
              {"template",
               {{"metadata", {{"labels", labels(job, role)}}},
                {"spec",
                 {{"restartPolicy", "Never"},
                  {"containers", {container}},
                  {"volumes", std::move(volumes)}}}}}}}};
  }

  // The standby coordinator (an etcd store): it waits for the job to start, then for its
  // coordinator's lease to run out, and takes the job over from etcd.
  ojson standby() const {
    ojson container = {
        {"name", "standby"},
        {"image", image},
        {"command",
         {"cohort", "run", "--standby", join(), "--token-file", std::string(kTokenDir) + "/token",
          "--run-dir", "/var/lib/cohort/run"}},
        {"resources", resources(1, "512Mi")},
        {"volumeMounts", {token_mount(), {{"name", "run"}, {"mountPath", "/var/lib/cohort"}}}}};
    return single_pod_job("standby", container,
                          {token_volume(job), {{"name", "run"}, {"emptyDir", ojson::object()}}});
  }

  ojson workers() const {
    const long threads = cfg.threads_per_worker;
    ojson container = {
        {"name", "worker"},
        {"image", image},
        {"command",
         {"cohort", "worker", "--join", join(), "--token-file", std::string(kTokenDir) + "/token",
          "--bind", "$(POD_IP)"}},
        {"env",
         {pod_ip_env(),
          {{"name", "OMP_NUM_THREADS"}, {"value", std::to_string(threads)}},
          {{"name", "OPENBLAS_NUM_THREADS"}, {"value", std::to_string(threads)}}}},
        {"resources", resources(threads, "2Gi")},
        {"volumeMounts", {token_mount(), {{"name", "dshm"}, {"mountPath", "/dev/shm"}}}}};
    // The shared-memory transport's rings of every pair on a host (comm.shm_host_bytes, 256 MiB)
    // and headroom: containers get 64 MiB of /dev/shm unless told otherwise.
    ojson dshm = {{"name", "dshm"}, {"emptyDir", {{"medium", "Memory"}, {"sizeLimit", "512Mi"}}}};
    return {{"apiVersion", "batch/v1"},
            {"kind", "Job"},
            {"metadata", metadata(job + "-workers", ns, job, "worker")},
            {"spec",
             {{"completionMode", "Indexed"},
              {"completions", cfg.workers},
              {"parallelism", cfg.workers},
              {"backoffLimit", cfg.elastic.max_restarts},
              {"template",
               {{"metadata", {{"labels", labels(job, "worker")}}},
                {"spec",
                 {{"subdomain", job + "-workers"},
                  {"restartPolicy", "Never"},
                  {"containers", {container}},
                  {"volumes", {token_volume(job), dshm}}}}}}}}};
  }

  // The parameter servers: server I is the pod of completion index I. A replacement pod under a
  // lost server's index backs the shards left without a copy.
  ojson servers() const {
    ojson index_env = {
        {"name", "SERVER_INDEX"},
        {"valueFrom",
         {{"fieldRef",
           {{"fieldPath", "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}}}}};
    ojson container = {{"name", "server"},
                       {"image", image},
                       {"command",
                        {"cohort", "ps-server", "--join", join(), "--index", "$(SERVER_INDEX)",
                         "--token-file", std::string(kTokenDir) + "/token", "--bind", "$(POD_IP)"}},
                       {"env", {pod_ip_env(), index_env}},
                       {"resources", resources(1, "1Gi")},
                       {"volumeMounts", {token_mount()}}};
    return {{"apiVersion", "batch/v1"},
            {"kind", "Job"},
            {"metadata", metadata(job + "-servers", ns, job, "server")},
            {"spec",
             {{"completionMode", "Indexed"},
              {"completions", cfg.parameter_servers},
              {"parallelism", cfg.parameter_servers},
              {"backoffLimit", kRestartsPerServer * cfg.parameter_servers},
              {"template",
               {{"metadata", {{"labels", labels(job, "server")}}},
                {"spec",
                 {{"restartPolicy", "Never"},
                  {"containers", {container}},
                  {"volumes", {token_volume(job)}}}}}}}}};
  }
};

void emit(YAML::Emitter& out, const ojson& v) {
  if (v.is_object()) {
    out << YAML::BeginMap;
    for (const auto& [k, x] : v.items()) {
      out << YAML::Key << k << YAML::Value;
      emit(out, x);
    }
    out << YAML::EndMap;
  } else if (v.is_array()) {
    out << YAML::BeginSeq;
    for (const auto& x : v) emit(out, x);
    out << YAML::EndSeq;
  } else if (v.is_string()) {
    // Quoted, so that "29400" or "true" stay strings.
    const std::string s = v.get<std::string>();
    if (s.find('\n') != std::string::npos) {
      out << YAML::Literal << s;
    } else {
      out << YAML::DoubleQuoted << s;
    }
  } else if (v.is_boolean()) {
    out << v.get<bool>();
  } else if (v.is_number_integer()) {
    out << v.get<int64_t>();
  } else if (v.is_number()) {
    out << v.get<double>();
  } else {
    out << YAML::Null;
  }
}

}  // namespace

int k8s_main(int argc, char** argv) {
  Args args(argc, argv, {"image", "set", "name", "namespace", "token-file", "out"}, {"help"});
  if (args.has("help")) return usage(std::cout, 0);
  if (args.positionals().size() != 1 || !args.has("image")) return usage(std::cerr, 2);
  train::LoadOptions load;
  load.overrides = args.all("set");
  load.check_paths = false;  // the data set is the image's
  const train::JobConfig cfg = train::load_job_config(args.positionals()[0], load);
  if (!cfg.program.python.empty()) {
    throw ConfigError(
        "cohort k8s: a Python program's workers are started by `cohort run`; "
        "run the image's cohort run in one pod instead");
  }
  std::string token;
  if (auto f = args.get("token-file")) {
    token = read_secret_file(*f, "--token-file");
  } else {
    uint8_t raw[32];
    random_bytes(raw, sizeof(raw));
    token = to_hex(raw, sizeof(raw));
  }
  const std::string job = k8s_name(args.get_or("name", cfg.name));
  std::string run_id;
  if (!cfg.coordinator.store.empty()) {
    // A fresh place under the prefix for each set of manifests: jobs never share keys.
    uint8_t raw[4];
    random_bytes(raw, sizeof(raw));
    run_id = job + "-" + to_hex(raw, sizeof(raw));
  }
  const Manifests m{.cfg = cfg,
                    .job = job,
                    .ns = args.get_or("namespace", ""),
                    .image = *args.get("image"),
                    .token = token,
                    .run_id = run_id};
  YAML::Emitter out;
  for (const ojson& doc : m.all()) {
    out << YAML::BeginDoc;
    emit(out, doc);
  }
  const std::string text = std::string(out.c_str()) + "\n";
  if (auto file = args.get("out"); file && *file != "-") {
    // It holds the token: a new file readable by this user only, whatever was there before.
    write_file_atomically(*file, text, 0600);
    std::fprintf(stderr, "cohort k8s: wrote %zu manifests for job '%s' to %s\n", m.all().size(),
                 m.job.c_str(), file->c_str());
  } else {
    std::fwrite(text.data(), 1, text.size(), stdout);
  }
  return 0;
}

}  // namespace cohort::cli
