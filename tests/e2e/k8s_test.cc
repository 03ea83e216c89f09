// `cohort k8s`: the manifests of every job file in examples/ are valid against the Kubernetes API's
// schema (Indexed Jobs, 1.24 and later; tests/k8s/validate.js, kubernetes-models from npm), carry
// the token only in their Secret, and a wrong job file is refused with its own errors.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "files.h"
#include "shell.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using cohort::e2e::sh;

std::string cohort() {
  return COHORT_BINARY;
}
std::string source(const std::string& path) {
  return std::string(COHORT_SOURCE_DIR) + "/" + path;
}

// The manifests' documents, as the validator parsed them; null (and a test failure) if invalid.
json validated(const fs::path& manifests) {
  auto v = sh("node " + source("tests/k8s/validate.js") + " " + manifests.string());
  EXPECT_EQ(v.exit_code, 0) << v.output;
  if (v.exit_code != 0) return nullptr;
  return json::parse(v.output);
}

const json* find(const json& docs, const std::string& kind, const std::string& name) {
  for (const auto& d : docs) {
    if (d["kind"] == kind && d["metadata"]["name"] == name) return &d;
  }
  return nullptr;
}

std::string base64_of(const std::string& s) {
  auto r = sh("printf %s '" + s + "' | base64 -w0");
  return r.output;
}

TEST(K8s, ManifestsOfEveryExampleJobAreValidAgainstTheApiSchema) {
  auto dir = cohort::e2e::fresh_dir("k8s", "examples");
  const std::string token(64, 'a');
  std::ofstream(dir / "token") << token;
  fs::permissions(dir / "token", fs::perms::owner_read | fs::perms::owner_write);
  for (const std::string name : {"fashion-mlp", "fashion-cnn", "synthetic-resnet"}) {
    SCOPED_TRACE(name);
    const fs::path out = dir / (name + ".yaml");
    // A file already there, readable by everyone (an earlier manifest): the new one is not.
    std::ofstream(out) << "old\n";
    fs::permissions(out, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                             fs::perms::others_read);
    auto r = sh(cohort() + " k8s " + source("examples/" + name + ".yaml") +
                " --image registry.example/cohort:1 --set workers=3 --set elastic.max_restarts=2" +
                " --token-file " + (dir / "token").string() + " --out " + out.string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    struct stat st {};
    ASSERT_EQ(::stat(out.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u) << "the manifests hold the token";
    const json docs = validated(out);
    ASSERT_TRUE(docs.is_array());
    ASSERT_EQ(docs.size(), 6u);

    const json* workers = find(docs, "Job", name + "-workers");
    ASSERT_NE(workers, nullptr);
    const json& spec = (*workers)["spec"];
    EXPECT_EQ(spec["completionMode"], "Indexed");
    EXPECT_EQ(spec["completions"], 3);
    EXPECT_EQ(spec["parallelism"], 3);
    EXPECT_EQ(spec["backoffLimit"], 2);
    const json& pod = spec["template"]["spec"];
    EXPECT_EQ(pod["subdomain"], name + "-workers");
    const json& worker = pod["containers"][0];
    EXPECT_EQ(worker["image"], "registry.example/cohort:1");
    EXPECT_EQ(worker["command"][3], name + "-coordinator:29400");
    EXPECT_EQ(worker["resources"]["requests"]["cpu"], "1");
    bool shm = false;
    for (const auto& v : pod["volumes"]) {
      shm |= v.value("emptyDir", json::object()).value("medium", "") == "Memory";
    }
    EXPECT_TRUE(shm) << "no memory-backed /dev/shm";

    const json* headless = find(docs, "Service", name + "-workers");
    ASSERT_NE(headless, nullptr);
    EXPECT_EQ((*headless)["spec"]["clusterIP"], "None");
    ASSERT_NE(find(docs, "Service", name + "-coordinator"), nullptr);
    const json* coordinator = find(docs, "Job", name + "-coordinator");
    ASSERT_NE(coordinator, nullptr);
    const json* config = find(docs, "ConfigMap", name + "-job");
    ASSERT_NE(config, nullptr);
    EXPECT_NE((*config)["data"]["job.yaml"].get<std::string>().find("workers: 3"),
              std::string::npos);

    // The token is in the Secret, mounted 0400 (what --token-file accepts), and nowhere else.
    const json* secret = find(docs, "Secret", name + "-token");
    ASSERT_NE(secret, nullptr);
    EXPECT_EQ((*secret)["data"]["token"], base64_of(token));
    std::ifstream in(out);
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    EXPECT_EQ(text.find(token), std::string::npos) << "the token in plain text";
    EXPECT_EQ(text.find(base64_of(token)), text.rfind(base64_of(token)));
    for (const auto& v : pod["volumes"]) {
      if (v.contains("secret")) {
        EXPECT_EQ(v["secret"]["defaultMode"], 0400);
      }
    }
  }
  fs::remove_all(dir);
}

// A job with parameter servers: an Indexed Job of them beside the workers', each server's index
// its completion index, the same coordinator and token as the workers.
TEST(K8s, AJobWithParameterServersHasAnIndexedJobOfThem) {
  auto dir = cohort::e2e::fresh_dir("k8s", "servers");
  const fs::path out = dir / "m.yaml";
  auto r =
      sh(cohort() + " k8s " + source("examples/fashion-cnn.yaml") +
         " --image cohort:1 --set parameter_servers=3 --set sync.mode=ssp --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json docs = validated(out);
  ASSERT_TRUE(docs.is_array());
  ASSERT_EQ(docs.size(), 7u);
  const json* servers = find(docs, "Job", "fashion-cnn-servers");
  ASSERT_NE(servers, nullptr);
  const json& spec = (*servers)["spec"];
  EXPECT_EQ(spec["completionMode"], "Indexed");
  EXPECT_EQ(spec["completions"], 3);
  EXPECT_EQ(spec["parallelism"], 3);
  EXPECT_EQ(spec["backoffLimit"], 9);
  const json& server = spec["template"]["spec"]["containers"][0];
  const std::vector<std::string> command = server["command"];
  const std::vector<std::string> expected = {
      "cohort",  "ps-server",       "--join",       "fashion-cnn-coordinator:29400",
      "--index", "$(SERVER_INDEX)", "--token-file", "/var/run/secrets/cohort/token",
      "--bind",  "$(POD_IP)"};
  EXPECT_EQ(command, expected);
  std::string index_from;
  for (const auto& e : server["env"]) {
    if (e["name"] == "SERVER_INDEX") index_from = e["valueFrom"]["fieldRef"]["fieldPath"];
  }
  EXPECT_EQ(index_from, "metadata.annotations['batch.kubernetes.io/job-completion-index']");
  EXPECT_EQ(spec["template"]["spec"]["volumes"][0]["secret"]["secretName"], "fashion-cnn-token");
  // Without servers there is no such Job (checked for every example above: 6 documents).
  fs::remove_all(dir);
}

// coordinator.store in etcd: the coordinator leads the job under a run id of its own under the
// prefix, the workers join that etcd address, and a standby coordinator waits beside it.
TEST(K8s, AJobKeptInEtcdHasAStandbyCoordinatorAndItsWorkersJoinEtcd) {
  auto dir = cohort::e2e::fresh_dir("k8s", "etcd");
  const fs::path out = dir / "m.yaml";
  const std::string store = "etcd://etcd-0.etcd:2379,etcd-1.etcd:2379/jobs";
  auto r = sh(cohort() + " k8s " + source("examples/fashion-mlp.yaml") +
              " --image cohort:1 --set coordinator.store=" + store + " --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json docs = validated(out);
  ASSERT_TRUE(docs.is_array());
  ASSERT_EQ(docs.size(), 7u);
  const json* coordinator = find(docs, "Job", "fashion-mlp-coordinator");
  const json* standby = find(docs, "Job", "fashion-mlp-standby");
  const json* workers = find(docs, "Job", "fashion-mlp-workers");
  ASSERT_TRUE(coordinator && standby && workers);
  const std::vector<std::string> lead =
      (*coordinator)["spec"]["template"]["spec"]["containers"][0]["command"];
  auto id = std::find(lead.begin(), lead.end(), "--run-id");
  ASSERT_NE(id, lead.end());
  ASSERT_NE(id + 1, lead.end());
  EXPECT_TRUE(id[1].starts_with("fashion-mlp-") && id[1].size() == 20) << id[1];
  const std::string join = store + "/" + id[1];
  const std::vector<std::string> worker =
      (*workers)["spec"]["template"]["spec"]["containers"][0]["command"];
  ASSERT_GE(worker.size(), 4u);
  EXPECT_EQ(worker[2], "--join");
  EXPECT_EQ(worker[3], join);
  const std::vector<std::string> wait =
      (*standby)["spec"]["template"]["spec"]["containers"][0]["command"];
  const std::vector<std::string> expected = {"cohort",       "run",
                                             "--standby",    join,
                                             "--token-file", "/var/run/secrets/cohort/token",
                                             "--run-dir",    "/var/lib/cohort/run"};
  EXPECT_EQ(wait, expected);
  // Another set of manifests is another job: its keys go elsewhere.
  auto again = sh(cohort() + " k8s " + source("examples/fashion-mlp.yaml") +
                  " --image cohort:1 --set coordinator.store=" + store);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(again.output.find(join), std::string::npos);
  fs::remove_all(dir);
}

// The validator is not a formality: a manifest the API would refuse fails it, naming the document.
TEST(K8s, TheApiSchemaRefusesABrokenManifest) {
  auto dir = cohort::e2e::fresh_dir("k8s", "broken");
  const fs::path out = dir / "m.yaml";
  ASSERT_EQ(sh(cohort() + " k8s " + source("examples/fashion-mlp.yaml") +
               " --image cohort:1 --out " + out.string())
                .exit_code,
            0);
  std::ifstream in(out);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  const std::string indexed = "completionMode: \"Indexed\"";
  ASSERT_NE(text.find(indexed), std::string::npos) << text;
  text.replace(text.find(indexed), indexed.size(), "completionMode: \"Sorted\"");
  std::ofstream(dir / "broken.yaml") << text;
  auto v = sh("node " + source("tests/k8s/validate.js") + " " + (dir / "broken.yaml").string());
  EXPECT_EQ(v.exit_code, 1) << v.output;
  EXPECT_NE(v.output.find("Job fashion-mlp-workers"), std::string::npos) << v.output;
  EXPECT_NE(v.output.find("completionMode"), std::string::npos) << v.output;
  fs::remove_all(dir);
}

TEST(K8s, AWrongJobFileIsRefusedWithItsOwnErrors) {
  auto dir = cohort::e2e::fresh_dir("k8s", "wrong");
  std::ofstream(dir / "job.yaml") << "name: x\nworkers: 2\ntrain:\n  batch_sise: 64\n";
  auto r = sh(cohort() + " k8s " + (dir / "job.yaml").string() + " --image cohort:1 --out " +
              (dir / "m.yaml").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("job.yaml:4:3: train.batch_sise"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "m.yaml"));
  EXPECT_EQ(sh(cohort() + " k8s " + (dir / "job.yaml").string()).exit_code, 2) << "no --image";
  fs::remove_all(dir);
}

}  // namespace
