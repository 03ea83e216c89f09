// End to end: `cohort run` with real worker processes, on Fashion-MNIST from the Debian package.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

#include "cohort/base/cpu_binding.h"
#include "files.h"
#include "shell.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using cohort::e2e::Result;
using cohort::e2e::sh;

fs::path fresh_dir(const std::string& name) {
  return cohort::e2e::fresh_dir("e2e", name);
}

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

std::string cohort() {
  return COHORT_BINARY;
}
std::string example(const std::string& name) {
  return std::string(COHORT_SOURCE_DIR) + "/examples/" + name;
}

TEST(RunJob, TwoWorkersTrainTheCnnToTheTargetAccuracy) {
  auto dir = fresh_dir("cnn");
  auto r = sh(cohort() + " run " + example("fashion-cnn.yaml") + " --run-dir " + dir.string() +
                  " --set workers=2 --set train.epochs=1",
              /*limit_s=*/560);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto s = read_json(dir / "summary.json");
  EXPECT_EQ(s["status"], "completed");
  EXPECT_EQ(s["world_size"], 2);
  EXPECT_GE(s["test_accuracy"].get<double>(), 0.84) << s.dump(2);
  EXPECT_GT(s["samples_per_sec"].get<double>(), 0);
  EXPECT_GT(s["comm_bytes"].get<double>(), 0);
  for (auto key : {"steps", "epochs", "wall_seconds", "comm_seconds"}) EXPECT_TRUE(s.contains(key));
  // Every rank saw its disjoint share: the two ranks together trained on the whole epoch.
  EXPECT_EQ(s["samples"].get<long>(), 60000);
  // Replicas identical at the end.
  EXPECT_EQ(s["per_rank"][0]["parameter_digest"], s["per_rank"][1]["parameter_digest"]);
  // The run directory.
  EXPECT_TRUE(fs::exists(dir / "config.yaml"));
  EXPECT_TRUE(fs::exists(dir / "events.jsonl"));
  std::ifstream metrics(dir / "metrics.jsonl");
  std::string line;
  int lines = 0;
  while (std::getline(metrics, line)) {
    auto m = json::parse(line);
    EXPECT_TRUE(m.contains("loss"));
    ++lines;
  }
  EXPECT_GT(lines, 10);
  EXPECT_NE(r.output.find("test accuracy"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

// Local workers run each on its own share of the CPUs while there are at most as many workers as
// CPUs (mpirun's default binding); --bind-to none leaves them on every CPU. Each worker reports
// how many CPUs its affinity mask holds.
TEST(RunJob, LocalWorkersAreBoundToTheirOwnCpus) {
  const std::vector<int> cpus = cohort::allowed_cpus();
  if (cpus.size() < 2) GTEST_SKIP() << "this process may use one CPU only";
  for (const std::string bind : {"auto", "none"}) {
    auto dir = fresh_dir("bind-" + bind);
    auto r = sh(cohort() + " run " + example("fashion-mlp.yaml") + " --run-dir " + dir.string() +
                " --bind-to " + bind + " --set workers=2 --set train.max_steps=20");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto s = read_json(dir / "summary.json");
    ASSERT_EQ(s["per_rank"].size(), 2u) << s.dump(2);
    for (int rank = 0; rank < 2; ++rank) {
      const size_t want = bind == "auto" ? cohort::cpu_share(cpus, rank, 2).size() : cpus.size();
      EXPECT_EQ(s["per_rank"][rank]["cpus"], want) << bind << ", rank " << rank;
    }
    fs::remove_all(dir);
  }
  auto bad = sh(cohort() + " run " + example("fashion-mlp.yaml") + " --bind-to socket");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--bind-to"), std::string::npos) << bad.output;
}

TEST(RunJob, TwoWorkersTrainTheMlpToTheTargetAccuracy) {
  auto dir = fresh_dir("mlp");
  auto r = sh(cohort() + " run " + example("fashion-mlp.yaml") + " --run-dir " + dir.string() +
              " --set workers=2 --set train.epochs=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto s = read_json(dir / "summary.json");
  EXPECT_GE(s["test_accuracy"].get<double>(), 0.80) << s.dump(2);
  fs::remove_all(dir);
}

// A training that diverges (its loss overflows to infinity, then NaN) is the user's to see, not a
// crash of the launcher: the progress records and the summary carry the loss as null (JSON has no
// NaN), and the job ends with its summary like any other.
TEST(RunJob, ATrainingWhoseLossIsNotFiniteStillEndsWithItsSummary) {
  auto dir = fresh_dir("diverged");
  auto r = sh(cohort() + " run " + example("fashion-mlp.yaml") + " --run-dir " + dir.string() +
              " --set workers=2 --set train.max_steps=30 --set 'train.optimizer.lr=1e30'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto s = read_json(dir / "summary.json");
  EXPECT_EQ(s["status"], "completed") << s.dump(2);
  EXPECT_TRUE(s["final_loss"].is_null()) << s.dump(2);
  bool null_loss = false;
  std::ifstream metrics(dir / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    null_loss |= json::parse(line).value("loss", json(0.0)).is_null();
  }
  EXPECT_TRUE(null_loss) << "no progress record with a loss that was not finite";
  fs::remove_all(dir);
}

// train.eval_every_steps records test accuracy on the way; train.stop_at_accuracy ends the job at
// the first evaluation that reaches it (the MLP passes 0.7 within its first 100 steps).
TEST(RunJob, PeriodicEvaluationStopsAtTheTargetAccuracy) {
  auto dir = fresh_dir("stop-at-accuracy");
  auto r = sh(cohort() + " run " + example("fashion-mlp.yaml") + " --run-dir " + dir.string() +
              " --set workers=2 --set train.max_steps=400 --set train.eval_every_steps=25" +
              " --set train.stop_at_accuracy=0.7 --set checkpoint.every_steps=0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<json> evals;
  std::ifstream metrics(dir / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    auto m = json::parse(line);
    if (m.contains("test_accuracy")) evals.push_back(m);
  }
  ASSERT_FALSE(evals.empty());
  for (size_t i = 0; i < evals.size(); ++i) {
    EXPECT_EQ(evals[i]["step"], 25 * static_cast<int>(i + 1)) << evals[i].dump();
    EXPECT_GT(evals[i]["train_seconds"].get<double>(), 0) << evals[i].dump();
    // Only the last evaluation reached the target: the job stopped there.
    EXPECT_EQ(evals[i]["test_accuracy"].get<double>() >= 0.7, i + 1 == evals.size())
        << evals[i].dump();
  }
  auto s = read_json(dir / "summary.json");
  EXPECT_EQ(s["status"], "completed") << s.dump(2);
  EXPECT_EQ(s["steps"], evals.back()["step"]) << s.dump(2);
  EXPECT_LT(s["steps"].get<int>(), 400) << s.dump(2);
  // The final evaluation is the one that stopped the job.
  EXPECT_EQ(s["test_accuracy"], evals.back()["test_accuracy"]) << s.dump(2);
  for (const auto& p : s["per_rank"]) EXPECT_GT(p["eval_seconds"].get<double>(), 0) << p.dump();
  fs::remove_all(dir);
}

// The mlp job with `sets` run for `steps` steps straight, and for `resume_at` steps and then
// `--resume`d up to `steps`: the two runs' summaries (null where a run failed).
std::pair<json, json> straight_and_resumed(const std::string& name, const std::string& sets,
                                           int resume_at, int steps) {
  auto straight = fresh_dir("straight-" + name), split = fresh_dir("split-" + name);
  const std::string job = cohort() + " run " + example("fashion-mlp.yaml") + " --run-dir ";
  auto a = sh(job + straight.string() + sets + " --set train.max_steps=" + std::to_string(steps));
  auto b = sh(job + split.string() + sets + " --set train.max_steps=" + std::to_string(resume_at));
  EXPECT_EQ(a.exit_code, 0) << a.output;
  EXPECT_EQ(b.exit_code, 0) << b.output;
  if (a.exit_code != 0 || b.exit_code != 0) return {};
  auto c = sh(cohort() + " run --resume " + split.string() +
              " --set train.max_steps=" + std::to_string(steps));
  EXPECT_EQ(c.exit_code, 0) << c.output;
  std::pair<json, json> out{read_json(straight / "summary.json"),
                            c.exit_code == 0 ? read_json(split / "summary.json") : json()};
  fs::remove_all(straight);
  fs::remove_all(split);
  return out;
}

TEST(RunJob, ResumeContinuesBitwiseExactly) {
  // 2N steps straight vs N steps, then --resume for N more: the same parameters, bit for bit.
  auto [s1, s2] = straight_and_resumed(
      "plain", " --set workers=2 --set model.name=mlp --set checkpoint.every_steps=20", 30, 60);
  ASSERT_FALSE(s1.is_null() || s2.is_null());
  EXPECT_EQ(s2["per_rank"][0]["resumed_from_step"], 30);
  EXPECT_EQ(s1["steps"], 60);
  EXPECT_EQ(s2["steps"], 60);
  EXPECT_EQ(s1["per_rank"][0]["parameter_digest"], s2["per_rank"][0]["parameter_digest"]);
  EXPECT_EQ(s1["test_accuracy"], s2["test_accuracy"]);
  // The checkpoint carries the committed sample counts: the resumed run's summary counts the
  // steps before the resume too, exactly as the straight run's does.
  EXPECT_EQ(s2["per_rank"][0]["epoch_samples"], s1["per_rank"][0]["epoch_samples"]);
  EXPECT_EQ(s1["per_rank"][0]["epoch_samples"][0]["samples"], 60 * 2 * 64);
}

// The same with gradient compression: every rank's residuals (and int8's rounding stream,
// PowerSGD's factors) are in the checkpoint, so the resumed job exchanges what the straight one
// did, bit for bit.
TEST(RunJob, ACompressedJobResumesBitwiseExactly) {
  for (const std::string codec : {"int8", "powersgd"}) {
    SCOPED_TRACE(codec);
    auto [s1, s2] = straight_and_resumed(
        codec,
        " --set workers=2 --set checkpoint.every_steps=20 --set comm.compression=" + codec +
            (codec == "powersgd" ? " --set comm.powersgd.warmup_steps=5" : ""),
        30, 50);
    ASSERT_FALSE(s1.is_null() || s2.is_null());
    EXPECT_EQ(s2["per_rank"][0]["resumed_from_step"], 30);
    EXPECT_EQ(s1["per_rank"][0]["parameter_digest"], s2["per_rank"][0]["parameter_digest"]);
    EXPECT_EQ(s1["per_rank"][1]["parameter_digest"], s2["per_rank"][1]["parameter_digest"]);
  }
}

// The resnet's BatchNorm running statistics are updated by each worker's own batches; with
// comm.buffers (default broadcast) every step leaves both replicas with the same ones, which the
// parameter check at every step (debug.check_params_every, buffers included) and the ranks'
// buffer digests at the end show; with comm.buffers: none they stay each worker's own.
// With drop_last, a wider world can find less than one global batch left of the epoch it resumes
// in: that epoch ends there (its tail is not trained on), and the next one starts.
TEST(RunJob, AResumeWithMoreWorkersEndsAnEpochWhoseRestIsShortOfAGlobalBatch) {
  auto dir = fresh_dir("wider-resume");
  // One worker, global batch 1,000: 59 steps leave 1,000 of the 60,000 samples of epoch 0.
  auto a = sh(cohort() + " run " + example("fashion-mlp.yaml") + " --run-dir " + dir.string() +
                  " --set workers=1 --set train.batch_size=1000 --set train.drop_last=true"
                  " --set train.max_steps=59 --set checkpoint.every_steps=59",
              120);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  // Two workers, global batch 2,000: nothing of epoch 0 is left for them; epoch 1 is 30 steps.
  auto b =
      sh(cohort() + " run --resume " + dir.string() + " --set workers=2 --set train.max_steps=1000",
         120);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const json s = read_json(dir / "summary.json");
  EXPECT_EQ(s["steps"], 89) << s.dump(2);
  const json counts = s["per_rank"][0]["epoch_samples"];
  ASSERT_EQ(counts.size(), 2u) << counts.dump();
  EXPECT_EQ(counts[0]["samples"], 59000) << counts.dump();
  EXPECT_EQ(counts[1]["samples"], 60000) << counts.dump();
  fs::remove_all(dir);
}

TEST(RunJob, ResNetReplicasKeepTheSameBatchNormStatistics) {
  auto synced = fresh_dir("bn-synced"), local = fresh_dir("bn-local");
  auto job = synced.parent_path() / "bn-resnet.yaml";
  {
    std::ofstream f(job);
    f << "name: bn-resnet\nworkers: 2\nmodel: {name: resnet}\n"
         "data: {name: synthetic, samples: 512, shape: [3, 8, 8], classes: 4}\n"
         "train: {epochs: 1, max_steps: 6, batch_size: 32, log_every_steps: 2}\n"
         "checkpoint: {every_steps: 0}\ndebug: {check_params_every: 1}\n";
  }
  auto a = sh(cohort() + " run " + job.string() + " --run-dir " + synced.string());
  ASSERT_EQ(a.exit_code, 0) << a.output;
  auto s = read_json(synced / "summary.json");
  EXPECT_EQ(s["status"], "completed");
  EXPECT_EQ(s["steps"], 6);
  EXPECT_EQ(s["per_rank"][0]["buffer_digest"], s["per_rank"][1]["buffer_digest"]);

  auto b = sh(cohort() + " run " + job.string() + " --run-dir " + local.string() +
              " --set comm.buffers=none");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  auto l = read_json(local / "summary.json");
  EXPECT_NE(l["per_rank"][0]["buffer_digest"], l["per_rank"][1]["buffer_digest"]);
  EXPECT_EQ(l["per_rank"][0]["parameter_digest"], l["per_rank"][1]["parameter_digest"]);
  fs::remove_all(synced);
  fs::remove_all(local);
  fs::remove(job);
}

// comm.integrity seals every frame between the workers; it changes what goes on the wire, never
// what is computed: the same job trains to bit-identical parameters with and without it, over
// shared memory and over TCP. (Between the two transports the bits may differ: Auto weighs what
// carries the pairs, so a bucket may be summed in another order.)
TEST(RunJob, SealedFramesTrainToTheSameParametersAsUnsealedOnes) {
  auto digest_of = [](const std::string& sets) {
    auto dir = fresh_dir("sealed");
    auto r = sh(cohort() + " run " + example("fashion-mlp.yaml") + " --run-dir " + dir.string() +
                " --set workers=3 --set train.max_steps=30 --set checkpoint.every_steps=0" + sets);
    EXPECT_EQ(r.exit_code, 0) << sets << "\n" << r.output;
    auto s = read_json(dir / "summary.json");
    EXPECT_EQ(s["steps"], 30) << sets;
    const std::string d = s["per_rank"][0]["parameter_digest"].get<std::string>();
    EXPECT_EQ(s["per_rank"][1]["parameter_digest"], d) << sets;
    EXPECT_EQ(s["per_rank"][2]["parameter_digest"], d) << sets;
    fs::remove_all(dir);
    return d;
  };
  const std::string shm = digest_of("");
  EXPECT_EQ(digest_of(" --set comm.integrity=hmac"), shm);
  EXPECT_EQ(digest_of(" --set comm.integrity=gmac"), shm);
  const std::string tcp = digest_of(" --set comm.transport=tcp");
  EXPECT_EQ(digest_of(" --set comm.integrity=gmac --set comm.transport=tcp"), tcp);
}

// `cohort checkpoint verify` reads checkpoints the way a resume does: whole ones pass, a file
// with one byte changed is named as corrupt, and the exit code says which happened.
TEST(RunJob, CheckpointVerifyNamesTheCorruptFile) {
  auto dir = fresh_dir("verify");
  auto r = sh(cohort() + " run " + example("fashion-mlp.yaml") + " --run-dir " + dir.string() +
              " --set workers=2 --set train.max_steps=40 --set checkpoint.every_steps=20");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto ckpts = dir / "checkpoints";
  auto ok = sh(cohort() + " checkpoint verify " + ckpts.string());
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find("2 verified, 0 corrupt"), std::string::npos) << ok.output;
  EXPECT_NE(ok.output.find("step 40"), std::string::npos) << ok.output;

  const auto newest = ckpts / "ckpt-000000000040.cohort";
  {
    std::fstream f(newest, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(fs::file_size(newest) / 2));
    char c = 0;
    f.read(&c, 1);
    f.seekp(static_cast<std::streamoff>(fs::file_size(newest) / 2));
    c = static_cast<char>(c ^ 0x20);
    f.write(&c, 1);
  }
  auto bad = sh(cohort() + " checkpoint verify " + ckpts.string());
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_NE(bad.output.find("1 verified, 1 corrupt"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("CORRUPT  " + newest.string()), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("SHA-256"), std::string::npos) << bad.output;
  EXPECT_EQ(sh(cohort() + " checkpoint verify").exit_code, 2);
  fs::remove_all(dir);
}

TEST(RunJob, WorkersStartedElsewhereJoinTheCoordinator) {
  // What mpirun or srun would do: the launcher only coordinates; workers join with the token file.
  // Their environment sizes OpenBLAS's pool otherwise than the job's threads_per_worker (1), as
  // one without OPENBLAS_NUM_THREADS does on a machine of several CPUs: the workers follow the job.
  auto dir = fresh_dir("external");
  auto token = (dir / "token").string();
  int port = 20000 + ::getpid() % 20000;
  std::string join = " worker --join 127.0.0.1:" + std::to_string(port) + " --token-file " + token;
  const std::string pool = "OPENBLAS_NUM_THREADS=2 OMP_NUM_THREADS=2 ";
  std::string cmd = "sh -c '" + cohort() + " run " + example("fashion-mlp.yaml") + " --run-dir " +
                    (dir / "run").string() + " --set workers=2 --set train.max_steps=40" +
                    " --external-workers --port " + std::to_string(port) + " --token-file " +
                    token + " & while [ ! -s " + token + " ]; do sleep 0.1; done; " + pool +
                    cohort() + join + " & " + pool + cohort() + join + "; wait'";
  auto r = sh(cmd);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto s = read_json(dir / "run" / "summary.json");
  EXPECT_EQ(s["status"], "completed") << s.dump(2);
  EXPECT_EQ(s["steps"], 40);
  EXPECT_EQ(s["per_rank"][0]["parameter_digest"], s["per_rank"][1]["parameter_digest"]);
  EXPECT_EQ(s["per_rank"][0]["blas_threads"], 1) << s.dump(2);
  EXPECT_EQ(s["per_rank"][1]["blas_threads"], 1) << s.dump(2);
  EXPECT_EQ(fs::status(token).permissions() & fs::perms::others_read, fs::perms::none);
  fs::remove_all(dir);
}

TEST(RunJob, BadJobFilesStopBeforeAnythingStarts) {
  auto dir = fresh_dir("bad");
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  };
  auto unknown = write("unknown.yaml", "name: x\nworkers: 2\ntrain:\n  batch_sise: 64\n");
  auto r = sh(cohort() + " run " + unknown + " --run-dir " + (dir / "run1").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("unknown.yaml:4:3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("train.batch_sise"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("batch_size"), std::string::npos) << r.output;  // the suggestion
  EXPECT_FALSE(fs::exists(dir / "run1" / "summary.json"));

  auto wrong_type = write("type.yaml", "workers: two\n");
  r = sh(cohort() + " run " + wrong_type + " --run-dir " + (dir / "run2").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("type.yaml:1:10"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("workers"), std::string::npos) << r.output;

  auto missing = write("missing.yaml", "data:\n  path: /nonexistent/fashion\n");
  r = sh(cohort() + " run " + missing + " --run-dir " + (dir / "run3").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("data.path"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("/nonexistent/fashion"), std::string::npos) << r.output;

  r = sh(cohort() + " run " + example("fashion-mlp.yaml") +
         " --set train.batch_size=-1 --run-dir " + (dir / "run4").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("train.batch_size"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

// What `cohort run --resume` and `--run-id` refuse, before they start anything: a run whose
// coordinator still runs (a second coordinator would take its port and its workers), a record of
// the coordinator that cannot be read, a run id that could not be a key, a run id without etcd.
TEST(RunJob, ResumeAndRunIdRefuseWhatTheyCannotGoOnWith) {
  auto dir = fresh_dir("refused");
  const fs::path live = dir / "live";
  // A job waiting for workers started elsewhere: its coordinator runs, with its record.
  const std::string cmd =
      "sh -c '" + cohort() + " run " + example("fashion-mlp.yaml") + " --run-dir " + live.string() +
      " --external-workers > " + (dir / "live.out").string() + " 2>&1 & pid=$!; while [ ! -s " +
      (live / "coordinator.json").string() + " ]; do sleep 0.1; done; " + cohort() +
      " run --resume " + live.string() + "; echo resume-exit=$?; kill -INT $pid; wait $pid'";
  auto r = sh(cmd);
  EXPECT_NE(r.output.find("still has its coordinator (pid "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("resume-exit=1"), std::string::npos) << r.output;
  EXPECT_EQ(read_json(live / "summary.json")["status"], "cancelled");  // untouched by the refusal
  EXPECT_FALSE(fs::exists(live / "coordinator.json"));

  // A record that is not one, beside a journal: named, nothing started.
  const fs::path broken = dir / "broken";
  fs::create_directories(broken);
  fs::copy_file(example("fashion-mlp.yaml"), broken / "config.yaml");
  std::ofstream(broken / "coordinator.json") << "{\"host\": ";
  std::ofstream(broken / "store.journal") << "";
  r = sh(cohort() + " run --resume " + broken.string());
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(
      r.output.find((broken / "coordinator.json").string() + " is not a coordinator's record"),
      std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(broken / "summary.json"));

  r = sh(cohort() + " run " + example("fashion-mlp.yaml") + " --run-id 'a/b' --run-dir " +
         (dir / "id1").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--run-id: 'a/b' is not a run id"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "id1"));
  r = sh(cohort() + " run " + example("fashion-mlp.yaml") + " --run-id job-1 --run-dir " +
         (dir / "id2").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--run-id: only for a job whose coordinator.store is etcd"),
            std::string::npos)
      << r.output;
  fs::remove_all(dir);
}

// Pids of the live children of `parent` (from /proc/<pid>/stat's ppid field).
std::vector<int> children_of(int parent) {
  std::vector<int> pids;
  for (auto& e : fs::directory_iterator("/proc")) {
    auto name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(in)), {});
    auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    std::string state;
    int ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) pids.push_back(std::stoi(name));
  }
  return pids;
}

TEST(RunJob, CtrlCStopsTheWholeJobWithoutOrphans) {
  auto dir = fresh_dir("sigint");
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setpgid(0, 0);
    int fd = ::open((dir / "out.txt").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    execl(COHORT_BINARY, COHORT_BINARY, "run", example("fashion-mlp.yaml").c_str(), "--run-dir",
          dir.c_str(), "--set", "workers=2", "--set", "train.epochs=5", nullptr);
    _exit(127);
  }
  // Wait until training is under way (progress records arrive), then interrupt.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline &&
         (!fs::exists(dir / "metrics.jsonl") || fs::file_size(dir / "metrics.jsonl") == 0)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(fs::exists(dir / "metrics.jsonl"));
  auto workers = children_of(pid);
  EXPECT_GE(workers.size(), 2u);
  kill(pid, SIGINT);
  int st = 0;
  bool exited = false;
  for (int i = 0; i < 300 && !exited; ++i) {
    exited = waitpid(pid, &st, WNOHANG) == pid;
    if (!exited) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!exited) {
    kill(-pid, SIGKILL);
    waitpid(pid, &st, 0);
  }
  ASSERT_TRUE(exited) << "launcher did not stop within 15 s";
  EXPECT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 130);
  // The launcher reaps its workers before it exits: none is left, not even as a zombie.
  for (int w : workers) EXPECT_NE(kill(w, 0), 0) << "worker " << w << " outlived the launcher";
  auto s = read_json(dir / "summary.json");
  EXPECT_EQ(s["status"], "cancelled");
  fs::remove_all(dir);
}

}  // namespace
