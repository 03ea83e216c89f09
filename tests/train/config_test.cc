#include "cohort/train/config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "cohort/base/error.h"
#include "cohort/base/yaml_reader.h"

namespace cohort::train {
namespace {

namespace fs = std::filesystem;

const std::string kFashion = "/usr/share/datasets/fashion-mnist";

// The message of the ConfigError that parsing `yaml` raises ("" if it parses).
std::string error_of(const std::string& yaml, std::vector<std::string> overrides = {}) {
  try {
    parse_job_config(yaml, "job.yaml", {.overrides = std::move(overrides), .check_paths = true});
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(JobConfig, EmptyFileGivesDefaults) {
  JobConfig c = parse_job_config("", "job.yaml");
  EXPECT_EQ(c, JobConfig{});
  EXPECT_EQ(c.data.path, kFashion);
  EXPECT_EQ(c.train.batch_size, 64);
  EXPECT_EQ(c.comm.algorithm, "auto");
}

TEST(JobConfig, ParsesTheDocumentedExample) {
  const std::string yaml = R"(name: fashion-cnn
workers: 2
threads_per_worker: 1
model: {name: cnn}
data: {name: fashion-mnist, path: /usr/share/datasets/fashion-mnist}
train: {epochs: 3, max_steps: 0, batch_size: 32, seed: 7, log_every_steps: 10,
        optimizer: {name: sgd, lr: 0.1, momentum: 0.5, weight_decay: 1e-4},
        lr_schedule: {warmup_steps: 100, scaling: linear}}
comm: {algorithm: ring, bucket_mb: 4.5, timeout_s: 30}
checkpoint: {every_steps: 250, keep: 2}
)";
  JobConfig c = parse_job_config(yaml, "job.yaml");
  EXPECT_EQ(c.name, "fashion-cnn");
  EXPECT_EQ(c.workers, 2);
  EXPECT_EQ(c.model.name, ModelKind::Cnn);
  EXPECT_EQ(c.model.memory_format, MemoryFormat::Auto);
  EXPECT_EQ(c.data.name, DatasetKind::FashionMnist);
  EXPECT_EQ(c.train.epochs, 3);
  EXPECT_EQ(c.train.batch_size, 32);
  EXPECT_EQ(c.train.seed, 7u);
  EXPECT_EQ(c.train.optimizer.name, OptimizerKind::Sgd);
  EXPECT_DOUBLE_EQ(c.train.optimizer.lr, 0.1);
  EXPECT_DOUBLE_EQ(c.train.optimizer.momentum, 0.5);
  EXPECT_DOUBLE_EQ(c.train.optimizer.weight_decay, 1e-4);
  EXPECT_EQ(c.train.lr_schedule.warmup_steps, 100);
  EXPECT_EQ(c.train.lr_schedule.scaling, LrScaling::Linear);
  EXPECT_EQ(c.comm.algorithm, "ring");
  EXPECT_DOUBLE_EQ(c.comm.bucket_mb, 4.5);
  EXPECT_EQ(c.checkpoint.every_steps, 250);
  EXPECT_EQ(c.checkpoint.keep, 2);
}

TEST(JobConfig, AdamAndSyntheticKeys) {
  JobConfig c = parse_job_config(R"(
model: {name: resnet}
data: {name: synthetic, samples: 512, shape: [3, 32, 32], classes: 100}
train:
  optimizer: {name: adam, betas: [0.8, 0.99], eps: 1.0e-6}
)",
                                 "job.yaml");
  EXPECT_EQ(c.data.name, DatasetKind::Synthetic);
  EXPECT_EQ(c.data.samples, 512);
  EXPECT_EQ(c.data.shape, (std::vector<int64_t>{3, 32, 32}));
  EXPECT_EQ(input_spec(c.data), (InputSpec{.shape = {3, 32, 32}, .classes = 100}));
  EXPECT_EQ(c.train.optimizer.name, OptimizerKind::Adam);
  EXPECT_DOUBLE_EQ(c.train.optimizer.lr, 0.001);  // adam's default
  EXPECT_DOUBLE_EQ(c.train.optimizer.betas[0], 0.8);
  EXPECT_DOUBLE_EQ(c.train.optimizer.eps, 1e-6);
}

TEST(JobConfig, ToYamlRoundTrips) {
  for (const std::string& yaml : {
           std::string(""),
           std::string(
               "name: a.b_c\nworkers: 3\ntrain: {seed: 12345678901, lr_schedule: "
               "{scaling: linear}, drop_last: true, optimizer: {lr: 0.1, "
               "weight_decay: 0.0001}}\ncomm: {bucket_mb: 0.3, timeout_s: 2.5, buffers: average}"),
           std::string("data: {name: synthetic, samples: 100, shape: [2, 9, 7], classes: 3}\n"
                       "train: {optimizer: {name: adam, lr: 3.0e-4, betas: [0.5, 0.75]}}"),
           std::string("workers: 4\nelastic: {min_workers: 2, max_workers: 6, heartbeat_s: 0.25, "
                       "failure_timeout_s: 1.5, max_restarts: 3, snapshot_every_steps: 7, "
                       "join_timeout_s: 30, coordinator_wait_s: 45.5}"),
           std::string("comm: {compression: int8, int8: {chunk: 64, stochastic_rounding: false}}"),
           std::string("comm: {integrity: hmac, transport: tcp}"),
           std::string("comm: {integrity: gmac}"),
           std::string("comm: {compression: topk, topk: {ratio: 0.05}, error_feedback: false}"),
           std::string("comm: {compression: powersgd, compression_min_kb: 0, "
                       "powersgd: {rank: 2, warmup_steps: 0}}"),
           std::string("dashboard: {port: 0, bind: 0.0.0.0}"),
           std::string("dashboard: {enabled: false, port: 9000}"),
           std::string("coordinator: {store: \"etcd://10.0.0.1:2379,10.0.0.2:2379/jobs\"}"),
       }) {
    JobConfig c = parse_job_config(yaml, "job.yaml");
    std::string out = to_yaml(c);
    JobConfig back = parse_job_config(out, "resolved.yaml");
    EXPECT_EQ(back, c) << out;
    EXPECT_EQ(to_yaml(back), out);
  }
}

TEST(JobConfig, LoadsFromFileAndNamesIt) {
  fs::path dir = fs::temp_directory_path() / ("cohort_cfg_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "job.yaml").string();
  std::ofstream(path) << "workers: 4\ntrain:\n  batch_size: 0\n";
  try {
    load_job_config(path);
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              path + ":3:15: train.batch_size: expected a positive integer, got 0");
  }
  std::ofstream(path) << "workers: 4\n";
  EXPECT_EQ(load_job_config(path).workers, 4);
  EXPECT_THROW(load_job_config((dir / "missing.yaml").string()), ConfigError);
  fs::remove_all(dir);
}

TEST(JobConfigErrors, WrongTypeNamesLineColumnAndKey) {
  EXPECT_EQ(error_of("name: x\nworkers: 2\ntrain:\n  epochs: 1\n  batch_size: sixty\n"),
            "job.yaml:5:15: train.batch_size: expected a positive integer, got \"sixty\"");
  // Flow style: the column points at the value inside the braces.
  EXPECT_EQ(error_of("train: {epochs: 1, batch_size: sixty}\n"),
            "job.yaml:1:32: train.batch_size: expected a positive integer, got \"sixty\"");
  // A quoted number is a string.
  EXPECT_EQ(error_of("workers: \"2\"\n"),
            "job.yaml:1:10: workers: expected an integer in [1, 4096], got \"2\"");
  EXPECT_EQ(error_of("train: {optimizer: {lr: [1]}}"),
            "job.yaml:1:25: train.optimizer.lr: expected a number > 0, got a list");
  EXPECT_EQ(error_of("train: {drop_last: 1}"),
            "job.yaml:1:20: train.drop_last: expected true or false, got 1");
  EXPECT_EQ(error_of("train: 5\n"), "job.yaml:1:8: train: expected a map of keys, got 5");
  EXPECT_EQ(error_of("workers:\n"),
            "job.yaml:1:1: workers: expected an integer in [1, 4096], "
            "got nothing");
  EXPECT_EQ(error_of("- a\n- b\n"), "job.yaml:1:1: a job file is a map of keys, got a list");
}

TEST(JobConfigErrors, OutOfRangeValues) {
  EXPECT_EQ(error_of("workers: 0"),
            "job.yaml:1:10: workers: expected an integer in [1, 4096], "
            "got 0");
  EXPECT_EQ(error_of("train:\n  optimizer:\n    momentum: 1.0\n"),
            "job.yaml:3:15: train.optimizer.momentum: expected a number in [0, 1), got 1.0");
  EXPECT_EQ(error_of("train: {optimizer: {lr: -0.1}}"),
            "job.yaml:1:25: train.optimizer.lr: expected a number > 0, got -0.1");
  EXPECT_EQ(error_of("comm: {timeout_s: .inf}"),
            "job.yaml:1:19: comm.timeout_s: expected a number of seconds in (0, 86400], got "
            "\".inf\"");
  EXPECT_EQ(error_of("checkpoint: {keep: 0}"),
            "job.yaml:1:20: checkpoint.keep: expected an integer in [1, 1000], got 0");
  EXPECT_EQ(error_of("data: {name: synthetic, shape: [1, 28]}"),
            "job.yaml:1:32: data.shape: expected a list of 3 positive integers [channels, height, "
            "width], got a list of 2");
  EXPECT_EQ(error_of("data: {name: synthetic, shape: [1, 28, -1]}"),
            "job.yaml:1:40: data.shape[2]: expected an integer in [1, 4096], got -1");
  EXPECT_EQ(error_of("model: {name: cnn}\ndata: {name: synthetic, shape: [1, 3, 28]}"),
            "job.yaml:2:32: data.shape: model cnn needs images of at least 4x4 pixels");
  EXPECT_EQ(error_of("name: \"my job\""),
            "job.yaml:1:7: name: expected 1 to 64 letters, digits, '-', '_' or '.', got "
            "\"my job\"");
}

TEST(JobConfig, ElasticKeys) {
  JobConfig d = parse_job_config("workers: 3", "job.yaml");
  EXPECT_EQ(d.elastic.min_or(d.workers), 3);  // 0: as many as workers
  EXPECT_EQ(d.elastic.max_or(d.workers), 3);
  EXPECT_EQ(d.elastic.max_restarts, 0);
  JobConfig c = parse_job_config(
      "workers: 3\nelastic: {min_workers: 2, max_restarts: 1, heartbeat_s: 0.2, "
      "failure_timeout_s: 1}",
      "job.yaml");
  EXPECT_EQ(c.elastic.min_or(c.workers), 2);
  EXPECT_EQ(c.elastic.max_restarts, 1);
  EXPECT_EQ(c.elastic.heartbeat_s, 0.2);
  EXPECT_EQ(c.elastic.failure_timeout_s, 1.0);
  EXPECT_EQ(d.elastic.coordinator_wait_s, 300.0);
  // Never shorter than the failure timeout unless the job file says so (which is an error).
  EXPECT_EQ(
      parse_job_config("elastic: {failure_timeout_s: 600}", "job.yaml").elastic.coordinator_wait_s,
      600.0);
}

TEST(JobConfigErrors, ElasticLimits) {
  EXPECT_EQ(error_of("workers: 2\nelastic:\n  min_workers: 3\n"),
            "job.yaml:3:16: elastic.min_workers: is 3, more than workers (2)");
  EXPECT_EQ(error_of("workers: 4\nelastic: {max_workers: 3}"),
            "job.yaml:2:24: elastic.max_workers: is 3, fewer than workers (4)");
  EXPECT_EQ(error_of("elastic: {heartbeat_s: 2, failure_timeout_s: 1}"),
            "job.yaml:1:46: elastic.failure_timeout_s: must be longer than elastic.heartbeat_s "
            "(2 s), or every worker is declared lost between two heartbeats");
  EXPECT_EQ(error_of("elastic: {failure_timeout_s: 20, coordinator_wait_s: 10}"),
            "job.yaml:1:54: elastic.coordinator_wait_s: must be at least "
            "elastic.failure_timeout_s (20 s): a worker gives up on its coordinator no sooner "
            "than the coordinator gives up on it");
  EXPECT_EQ(error_of("elastic: {snapshot_every_steps: 0}"),
            "job.yaml:1:33: elastic.snapshot_every_steps: expected a positive integer, got 0");
  EXPECT_EQ(
      error_of("elastic: {heartbeat_s: -1}"),
      "job.yaml:1:24: elastic.heartbeat_s: expected a number of seconds in (0, 3600], got -1");
  EXPECT_EQ(error_of("elastic: {max_restart: 1}"),
            "job.yaml:1:11: elastic.max_restart: unknown key; did you mean 'max_restarts'?");
}

TEST(JobConfigErrors, UnknownKeysSuggestTheClosestOne) {
  EXPECT_EQ(error_of("train:\n  batchsize: 64\n"),
            "job.yaml:2:3: train.batchsize: unknown key; did you mean 'batch_size'?");
  EXPECT_EQ(error_of("worker: 2"), "job.yaml:1:1: worker: unknown key; did you mean 'workers'?");
  // A key that belongs to another section.
  EXPECT_EQ(error_of("train: {lr: 0.1}"),
            "job.yaml:1:9: train.lr: unknown key; did you mean 'train.optimizer.lr'?");
  EXPECT_EQ(error_of("comm: {zzz: 1}"),
            "job.yaml:1:8: comm.zzz: unknown key; valid keys: algorithm, transport, integrity, "
            "bucket_mb, buffers, timeout_s, compression, compression_min_kb, error_feedback, int8, "
            "topk, powersgd");
  EXPECT_EQ(error_of("comm: {transport: infiniband}"),
            "job.yaml:1:19: comm.transport: expected one of auto, tcp, shm, got \"infiniband\"");
  EXPECT_EQ(error_of("comm: {integrity: tls}"),
            "job.yaml:1:19: comm.integrity: expected one of none, hmac, gmac, got \"tls\"");
  EXPECT_EQ(error_of("comm: {buffers: sync}"),
            "job.yaml:1:17: comm.buffers: expected one of broadcast, average, none, got \"sync\"");
  EXPECT_EQ(error_of("model: {name: lenet}"),
            "job.yaml:1:15: model.name: expected one of mlp, cnn, resnet, got \"lenet\"");
  EXPECT_EQ(error_of("model: {name: resnt}"),
            "job.yaml:1:15: model.name: expected one of mlp, cnn, resnet, got \"resnt\"; did you "
            "mean 'resnet'?");
  EXPECT_EQ(error_of("model: {name: cnn, memory_format: nhwc}"),
            "job.yaml:1:35: model.memory_format: expected one of auto, channels_last, contiguous, "
            "got \"nhwc\"");
  EXPECT_EQ(parse_job_config("model: {name: cnn, memory_format: contiguous}", "job.yaml")
                .model.memory_format,
            MemoryFormat::Contiguous);
  EXPECT_EQ(error_of("workers: 1\nworkers: 2\n"), "job.yaml:2:1: workers: duplicate key");
}

TEST(JobConfigErrors, KeysThatDoNotApply) {
  EXPECT_EQ(error_of("train: {optimizer: {name: adam, momentum: 0.9}}"),
            "job.yaml:1:43: train.optimizer.momentum: does not apply when train.optimizer.name "
            "is adam (only to sgd)");
  EXPECT_EQ(error_of("train: {optimizer: {betas: [0.9, 0.9]}}"),
            "job.yaml:1:28: train.optimizer.betas: does not apply when train.optimizer.name is "
            "sgd (only to adam)");
  EXPECT_EQ(error_of("data: {samples: 10}"),
            "job.yaml:1:17: data.samples: does not apply when data.name is fashion-mnist (only "
            "to synthetic)");
  EXPECT_EQ(error_of("data: {name: synthetic, path: /tmp}"),
            "job.yaml:1:31: data.path: does not apply when data.name is synthetic");
}

TEST(JobConfig, PeriodicEvaluationKeys) {
  JobConfig c =
      parse_job_config("train: {eval_every_steps: 50, stop_at_accuracy: 0.85}", "job.yaml");
  EXPECT_EQ(c.train.eval_every_steps, 50);
  EXPECT_DOUBLE_EQ(c.train.stop_at_accuracy, 0.85);
  JobConfig d = parse_job_config("", "job.yaml");
  EXPECT_EQ(d.train.eval_every_steps, 0);
  EXPECT_EQ(d.train.stop_at_accuracy, 0);
}

TEST(JobConfigErrors, PeriodicEvaluationKeys) {
  EXPECT_EQ(error_of("train: {stop_at_accuracy: 0.9}"),
            "job.yaml:1:27: train.stop_at_accuracy: needs train.eval_every_steps > 0 (the accuracy "
            "is measured by the periodic evaluation)");
  EXPECT_EQ(error_of("train: {eval_every_steps: 10, stop_at_accuracy: 1.5}"),
            "job.yaml:1:49: train.stop_at_accuracy: expected a number in [0, 1], got 1.5");
  EXPECT_EQ(error_of("", {"train.eval_every_steps=-1"}),
            "--set train.eval_every_steps=-1: train.eval_every_steps: expected a non-negative "
            "integer, got -1");
}

TEST(JobConfig, CompressionKeys) {
  JobConfig c = parse_job_config(
      "comm: {compression: powersgd, compression_min_kb: 16, powersgd: {rank: 8, warmup_steps: 3}}",
      "job.yaml");
  EXPECT_EQ(c.comm.compression, "powersgd");
  EXPECT_DOUBLE_EQ(c.comm.compression_min_kb, 16);
  EXPECT_EQ(c.comm.powersgd_rank, 8);
  EXPECT_EQ(c.comm.powersgd_warmup_steps, 3);
  EXPECT_TRUE(c.comm.error_feedback);
  EXPECT_EQ(parse_job_config("", "job.yaml").comm.compression, "none");
}

TEST(JobConfigErrors, CompressionKeys) {
  EXPECT_EQ(error_of("comm: {compression: gzip}"),
            "job.yaml:1:21: comm.compression: expected one of none, fp16, bf16, int8, topk, "
            "powersgd, got \"gzip\"");
  EXPECT_EQ(error_of("comm: {compression: fp16, topk: {ratio: 0.1}}"),
            "job.yaml:1:33: comm.topk: does not apply when comm.compression is fp16");
  EXPECT_EQ(error_of("comm: {compression: topk, topk: {ratio: 0}}"),
            "job.yaml:1:41: comm.topk.ratio: expected a number in (0, 1], got 0");
  EXPECT_EQ(error_of("comm:\n  compression: powersgd\n  powersgd: {rank: 0}\n"),
            "job.yaml:3:20: comm.powersgd.rank: expected an integer in [1, 1024], got 0");
  EXPECT_EQ(error_of("", {"comm.compression=int8", "comm.int8.chunk=-1"}),
            "--set comm.int8.chunk=-1: comm.int8.chunk: expected an integer in [1, 1048576], got "
            "-1");
}

TEST(JobConfigErrors, MissingDataPath) {
  EXPECT_EQ(error_of("data:\n  path: /nonexistent/fmnist\n"),
            "job.yaml:2:9: data.path: no such directory \"/nonexistent/fmnist\"");
  // A directory without the files.
  EXPECT_EQ(error_of("data: {path: /}"),
            "job.yaml:1:14: data.path: \"/\" has no train-images-idx3-ubyte.gz");
  // The default path of mnist is named as such when it is missing.
  if (!fs::exists("/usr/share/datasets/mnist")) {
    EXPECT_EQ(error_of("data: {name: mnist}"),
              "job.yaml: data.path: no such directory \"/usr/share/datasets/mnist\" (the default "
              "for this data.name)");
  }
  // The check can be turned off for tools that only read the file.
  EXPECT_NO_THROW(parse_job_config("data: {path: /nonexistent}", "job.yaml",
                                   {.overrides = {}, .check_paths = false}));
}

TEST(JobConfigErrors, SyntaxErrorsAreLocated) {
  std::string e = error_of("train: {epochs: 1\nworkers: 2\n");
  EXPECT_EQ(e.rfind("job.yaml:", 0), 0u) << e;
  EXPECT_NE(e.find("invalid YAML"), std::string::npos) << e;
  EXPECT_EQ(error_of("a: b: c"), "job.yaml:1:5: invalid YAML: illegal map value");
}

TEST(JobConfigOverrides, SetScalarsListsAndMaps) {
  JobConfig c = parse_job_config(
      "train: {batch_size: 8}\n", "job.yaml",
      {.overrides = {"train.batch_size=128", "workers=3", "data={name: synthetic, samples: 64}",
                     "data.shape=[3, 8, 8]", "train.optimizer.lr=0.5", "comm.algorithm=ring"}});
  EXPECT_EQ(c.train.batch_size, 128);
  EXPECT_EQ(c.workers, 3);
  EXPECT_EQ(c.data.name, DatasetKind::Synthetic);
  EXPECT_EQ(c.data.samples, 64);
  EXPECT_EQ(c.data.shape, (std::vector<int64_t>{3, 8, 8}));
  EXPECT_DOUBLE_EQ(c.train.optimizer.lr, 0.5);
  EXPECT_EQ(c.comm.algorithm, "ring");
  // Later overrides win.
  EXPECT_EQ(parse_job_config("", "j", {.overrides = {"workers=2", "workers=5"}}).workers, 5);
}

TEST(JobConfigOverrides, ErrorsNameTheOverride) {
  EXPECT_EQ(error_of("", {"train.lr=x"}),
            "--set train.lr=x: train.lr: unknown key; did you mean 'train.optimizer.lr'?");
  EXPECT_EQ(error_of("train: {batch_size: 8}", {"train.batch_size=sixty"}),
            "--set train.batch_size=sixty: train.batch_size: expected a positive integer, got "
            "\"sixty\"");
  // An error inside a map the override set.
  EXPECT_EQ(error_of("", {"train={epochs: 0}"}),
            "--set train={epochs: 0}: train.epochs: expected a positive integer, got 0");
  // A section the override created on its way.
  EXPECT_EQ(error_of("", {"trian.epochs=2"}),
            "--set trian.epochs=2: trian: unknown key; did you mean 'train'?");
  EXPECT_EQ(error_of("workers: 2", {"workers"}), "--set workers: expected key.path=value");
  EXPECT_EQ(error_of("workers: 2", {"workers.x=1"}),
            "--set workers.x=1: 'workers' is 2, not a map");
  EXPECT_EQ(error_of("", {"a..b=1"}),
            "--set a..b=1: 'a..b' is not a key path (names separated "
            "by dots)");
  EXPECT_NE(error_of("", {"workers=[1"}).find("--set workers=[1: the value is not valid YAML"),
            std::string::npos);
  // Errors elsewhere in the file still point into the file.
  EXPECT_EQ(error_of("train: {epochs: 0}", {"workers=2"}),
            "job.yaml:1:17: train.epochs: expected a positive integer, got 0");
}

TEST(JobConfig, ADashboardSectionTurnsTheConsoleOn) {
  EXPECT_FALSE(parse_job_config("", "j").dashboard.enabled);
  DashboardConfig d = parse_job_config("dashboard:", "j").dashboard;
  EXPECT_TRUE(d.enabled);
  EXPECT_EQ(d.bind, "127.0.0.1");  // loopback unless the file says otherwise
  EXPECT_EQ(d.port, 8080);
  d = parse_job_config("", "j", {.overrides = {"dashboard.port=0"}}).dashboard;
  EXPECT_TRUE(d.enabled);
  EXPECT_EQ(d.port, 0);
  EXPECT_FALSE(parse_job_config("dashboard: {enabled: false}", "j").dashboard.enabled);
  EXPECT_EQ(error_of("dashboard: {port: 70000}"),
            "job.yaml:1:19: dashboard.port: expected a port number in [0, 65535], got 70000");
  EXPECT_EQ(error_of("dashboard: {prot: 1}"),
            "job.yaml:1:13: dashboard.prot: unknown key; did you mean 'port'?");
  EXPECT_EQ(error_of("dashboard: 8080"),
            "job.yaml:1:12: dashboard: expected a map of keys, got 8080");
}

TEST(JobConfig, CoordinatorStoreIsAnEtcdAddressOrNothing) {
  EXPECT_EQ(parse_job_config("", "j").coordinator.store, "");
  EXPECT_EQ(parse_job_config("coordinator: {store: etcd://h:2379/jobs}", "j").coordinator.store,
            "etcd://h:2379/jobs");
  EXPECT_EQ(error_of("coordinator: {store: h:2379}"),
            "job.yaml:1:22: coordinator.store: bad etcd address 'h:2379': expected "
            "etcd://HOST:PORT[,HOST:PORT]/PREFIX");
  EXPECT_EQ(error_of("coordinator:\n  store: etcd://h:2379"),
            "job.yaml:2:10: coordinator.store: etcd address 'etcd://h:2379' names no prefix: "
            "etcd://HOST:PORT/PREFIX keeps one job's keys apart from another's");
}

TEST(JobConfig, ExamplesAreValid) {
  for (const char* name : {"fashion-cnn.yaml", "fashion-mlp.yaml", "synthetic-resnet.yaml"}) {
    const std::string path = std::string(COHORT_SOURCE_DIR) + "/examples/" + name;
    JobConfig c = load_job_config(path, {.overrides = {}, .check_paths = false});
    EXPECT_EQ(c.name + ".yaml", name);
  }
  const JobConfig elastic = load_job_config(
      std::string(COHORT_SOURCE_DIR) + "/examples/python/elastic.yaml", {.check_paths = false});
  EXPECT_EQ(elastic.program.python, "examples/python/train_elastic.py");
  EXPECT_EQ(elastic.elastic.min_workers, 2);
}

// Every key the resolved config can hold is documented in docs/job-config.md.
TEST(JobConfig, EveryKeyIsDocumented) {
  std::ifstream in(std::string(COHORT_SOURCE_DIR) + "/docs/job-config.md");
  ASSERT_TRUE(in) << "docs/job-config.md";
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::function<void(const YAML::Node&, const std::string&)> walk = [&](const YAML::Node& n,
                                                                        const std::string& path) {
    for (auto it = n.begin(); it != n.end(); ++it) {
      std::string key = path.empty() ? it->first.Scalar() : path + "." + it->first.Scalar();
      if (it->second.IsMap()) {
        walk(it->second, key);
      } else {
        EXPECT_NE(doc.find("| `" + key + "` |"), std::string::npos) << key << " is not documented";
      }
    }
  };
  const std::string program =
      "program: {python: " + std::string(COHORT_SOURCE_DIR) + "/examples/python/train_ddp.py}";
  for (const std::string& yaml :
       {std::string(), std::string("dashboard:"), program,
        std::string("data: {name: synthetic}\ntrain: {optimizer: {name: adam}}"),
        std::string("sync: {mode: local_sgd, outer_optimizer: {name: nesterov}}"),
        std::string("parameter_servers: 2\nsync: {mode: ssp}")}) {
    walk(YAML::Load(to_yaml(parse_job_config(yaml, "j"))), "");
  }
}

TEST(JobConfigFaults, ParsesEveryKindAndRoundTrips) {
  JobConfig c = parse_job_config(R"(
workers: 3
faults:
  - {kind: kill, rank: 2, at_step: 40}
  - {kind: hang, rank: 1, at_step: 7}
  - {kind: hang, rank: 0, at_step: 9, seconds: 2.5}
  - {kind: slow, rank: 1, seconds: 0.25}
  - kind: disconnect
    rank: 0
    at_step: 3
  - {kind: slow, rank: 2, at_step: 5, factor: 2.5}
  - {kind: stragglers, at_step: 10, every: 10, factor: 3}
debug: {check_collectives: true, check_params_every: 50, hang_timeout_s: 20,
        flight_recorder_entries: 64, straggler_margin: 0.5, straggler_window: 8,
        bandwidth_probe_mb: 0}
)",
                                 "job.yaml");
  ASSERT_EQ(c.faults.size(), 7u);
  EXPECT_EQ(c.faults[0], (FaultConfig{.kind = FaultKind::Kill, .rank = 2, .at_step = 40}));
  EXPECT_EQ(c.faults[1], (FaultConfig{.kind = FaultKind::Hang, .rank = 1, .at_step = 7}));
  EXPECT_EQ(c.faults[2].seconds, 2.5);
  EXPECT_EQ(c.faults[3],
            (FaultConfig{.kind = FaultKind::Slow, .rank = 1, .at_step = 0, .seconds = 0.25}));
  EXPECT_EQ(c.faults[4].kind, FaultKind::Disconnect);
  EXPECT_EQ(c.faults[5],
            (FaultConfig{.kind = FaultKind::Slow, .rank = 2, .at_step = 5, .factor = 2.5}));
  EXPECT_EQ(c.faults[6],
            (FaultConfig{.kind = FaultKind::Stragglers, .at_step = 10, .factor = 3, .every = 10}));
  EXPECT_TRUE(c.debug.check_collectives);
  EXPECT_EQ(c.debug.check_params_every, 50);
  EXPECT_EQ(c.debug.hang_timeout_s, 20);
  EXPECT_EQ(c.debug.flight_recorder_entries, 64);
  EXPECT_EQ(c.debug.straggler_margin, 0.5);
  EXPECT_EQ(c.debug.straggler_window, 8);
  EXPECT_EQ(c.debug.bandwidth_probe_mb, 0);
  EXPECT_EQ(parse_job_config(to_yaml(c), "resolved.yaml"), c);
  EXPECT_TRUE(parse_job_config("", "job.yaml").faults.empty());
  EXPECT_EQ(parse_job_config("", "job.yaml",
                             {.overrides = {"workers=2", "faults=[{kind: hang, rank: 1}]"}})
                .faults.size(),
            1u);
}

TEST(JobConfigDebug, StragglerAndProbeKeysAreValidated) {
  EXPECT_EQ(error_of("debug: {straggler_margin: 0}\n"),
            "job.yaml:1:27: debug.straggler_margin: expected a number in (0, 100] (0.25: 25% over "
            "the others' median), got 0");
  EXPECT_EQ(error_of("debug:\n  straggler_window: 0\n"),
            "job.yaml:2:21: debug.straggler_window: expected an integer in [1, 1000000], got 0");
  EXPECT_EQ(error_of("debug: {bandwidth_probe_mb: -1}\n"),
            "job.yaml:1:29: debug.bandwidth_probe_mb: expected a number of MB in [0, 256] (0: no "
            "probe), got -1");
  const JobConfig d = parse_job_config("", "job.yaml");
  EXPECT_EQ(d.debug.straggler_margin, 0.25);
  EXPECT_EQ(d.debug.straggler_window, 20);
  EXPECT_EQ(d.debug.bandwidth_probe_mb, 4);
}

TEST(JobConfigFaults, ErrorsNameTheElementAndItsKey) {
  EXPECT_EQ(error_of("workers: 2\nfaults:\n  - {kind: kill, rank: 2}\n"),
            "job.yaml:3:24: faults[0].rank: expected a rank in [0, 1] (workers is 2), got 2");
  EXPECT_EQ(error_of("faults:\n  - {kind: kill, rank: 0, at_step: 5, at_step: 500}\n"),
            "job.yaml:2:39: faults[0].at_step: duplicate key");
  EXPECT_EQ(
      error_of("workers: 2\nfaults:\n  - {kind: kill, rank: 0}\n  - {kind: freeze, rank: 0}\n"),
      "job.yaml:4:12: faults[1].kind: expected one of kill, hang, slow, disconnect, stragglers, "
      "got \"freeze\"");
  EXPECT_EQ(error_of("faults:\n  - {kind: slow, rank: 0}\n"),
            "job.yaml:2:5: faults[0]: a slow fault needs seconds (the time each step takes "
            "longer) or factor (how many times its compute each step takes)");
  EXPECT_EQ(error_of("faults:\n  - {kind: slow, rank: 0, factor: 2, seconds: 1}\n"),
            "job.yaml:2:47: faults[0].seconds: a slow fault takes seconds or factor, not both");
  EXPECT_EQ(error_of("faults:\n  - {kind: slow, rank: 0, factor: 1}\n"),
            "job.yaml:2:35: faults[0].factor: expected a number in (1, 1000], got 1");
  EXPECT_EQ(error_of("faults:\n  - {kind: stragglers, rank: 0, every: 10, factor: 3}\n"),
            "job.yaml:2:30: faults[0].rank: does not apply when the kind is stragglers (the "
            "worker is chosen at random)");
  EXPECT_EQ(error_of("faults:\n  - {kind: stragglers, factor: 3}\n"),
            "job.yaml:2:5: faults[0]: a stragglers fault needs every (the window in steps) and "
            "factor");
  EXPECT_EQ(error_of("faults:\n  - {kind: hang, rank: 0, every: 3}\n"),
            "job.yaml:2:34: faults[0].every: does not apply when the kind is hang (only to "
            "stragglers)");
  EXPECT_EQ(error_of("faults:\n  - {kind: kill, rank: 0, seconds: 3}\n"),
            "job.yaml:2:36: faults[0].seconds: does not apply when the kind is kill (only to slow "
            "and hang)");
  EXPECT_EQ(error_of("faults:\n  - {kind: kill, rnak: 0}\n"),
            "job.yaml:2:18: faults[0].rnak: unknown key; did you mean 'rank'?");
  EXPECT_EQ(error_of("faults:\n  - {rank: 0}\n"),
            "job.yaml:2:5: faults[0]: a fault needs a kind (kill, hang, slow, disconnect or "
            "stragglers)");
  EXPECT_EQ(error_of("faults: {kind: kill}\n"),
            "job.yaml:1:9: faults: expected a list of faults, got a map");
  EXPECT_EQ(
      error_of("faults: [kill]\n"),
      "job.yaml:1:10: faults[0]: expected a map {kind, rank, at_step, seconds, factor, every}, "
      "got \"kill\"");
  EXPECT_EQ(error_of("faults: [{kind: hang, rank: 0, at_step: -1}]"),
            "job.yaml:1:41: faults[0].at_step: expected a non-negative integer, got -1");
  EXPECT_EQ(error_of("debug: {check_params_every: -5}"),
            "job.yaml:1:29: debug.check_params_every: expected a non-negative integer, got -5");
  EXPECT_EQ(error_of("debug: {check_colectives: true}"),
            "job.yaml:1:9: debug.check_colectives: unknown key; did you mean 'check_collectives'?");
}

TEST(JobConfigProgram, APythonScriptWithItsArgumentsRoundTrips) {
  const std::string script = std::string(COHORT_SOURCE_DIR) + "/examples/python/train_ddp.py";
  JobConfig c = parse_job_config("workers: 2\nprogram:\n  python: " + script +
                                     "\n  args: [--backend, cohort, --max-steps, 30, \"a b\"]\n",
                                 "job.yaml");
  EXPECT_EQ(c.program.python, script);
  EXPECT_EQ(c.program.args,
            (std::vector<std::string>{"--backend", "cohort", "--max-steps", "30", "a b"}));
  EXPECT_EQ(c.program.interpreter, "/usr/bin/python3");
  EXPECT_EQ(parse_job_config(to_yaml(c), "resolved.yaml"), c);
  EXPECT_TRUE(parse_job_config("", "job.yaml").program.python.empty());
  // Without a program the resolved config has no program section.
  EXPECT_EQ(to_yaml(parse_job_config("", "job.yaml")).find("program"), std::string::npos);
  c = parse_job_config("program: {python: " + script + ", interpreter: /opt/py/bin/python}\n",
                       "job.yaml");
  EXPECT_EQ(c.program.interpreter, "/opt/py/bin/python");
  EXPECT_TRUE(c.program.args.empty());
}

TEST(JobConfigProgram, ErrorsNameTheKey) {
  EXPECT_EQ(error_of("program: {args: [-v]}\n"),
            "job.yaml:1:10: program: a program needs the Python script to run (program.python)");
  EXPECT_EQ(error_of("program: {python: /nonexistent/train.py}\n"),
            "job.yaml:1:19: program.python: no such script: /nonexistent/train.py");
  const std::string script = std::string(COHORT_SOURCE_DIR) + "/examples/python/train_ddp.py";
  EXPECT_EQ(error_of("program:\n  python: " + script + "\n  args: -v\n"),
            "job.yaml:3:9: program.args: expected a list of the script's arguments, got \"-v\"");
  EXPECT_EQ(error_of("program:\n  python: " + script + "\n  args: [-v, {a: 1}]\n"),
            "job.yaml:3:14: program.args[1]: expected a string or a number, got a map");
  EXPECT_EQ(error_of("program:\n  python: " + script + "\n  interpeter: /usr/bin/python3\n"),
            "job.yaml:3:3: program.interpeter: unknown key; did you mean 'interpreter'?");
  EXPECT_EQ(error_of("program: train.py\n"),
            "job.yaml:1:10: program: expected a map of keys, got \"train.py\"");
}

TEST(JobConfigSync, LocalSgdKeysRoundTrip) {
  JobConfig c = parse_job_config("", "job.yaml");
  EXPECT_EQ(c.sync.mode, SyncKind::AllReduce);
  c = parse_job_config("sync: {mode: local_sgd, period: 4, warmup_steps: 100}", "job.yaml");
  EXPECT_EQ(c.sync.mode, SyncKind::LocalSgd);
  EXPECT_EQ(c.sync.period, 4);
  EXPECT_EQ(c.sync.warmup_steps, 100);
  EXPECT_EQ(c.sync.outer_optimizer.name, OuterOptimizerKind::None);
  EXPECT_FALSE(c.sync.balance);
  EXPECT_EQ(parse_job_config(to_yaml(c), "resolved.yaml"), c);
  c = parse_job_config("sync: {balance: auto}", "job.yaml");
  EXPECT_TRUE(c.sync.balance);
  EXPECT_EQ(parse_job_config(to_yaml(c), "resolved.yaml"), c);
  c = parse_job_config(
      "sync:\n  mode: local_sgd\n  outer_optimizer: {name: nesterov, lr: 0.5, momentum: 0.8}\n",
      "job.yaml");
  EXPECT_EQ(c.sync.period, 8);
  EXPECT_EQ(c.sync.outer_optimizer.name, OuterOptimizerKind::Nesterov);
  EXPECT_DOUBLE_EQ(c.sync.outer_optimizer.lr, 0.5);
  EXPECT_DOUBLE_EQ(c.sync.outer_optimizer.momentum, 0.8);
  EXPECT_EQ(parse_job_config(to_yaml(c), "resolved.yaml"), c);
  EXPECT_EQ(parse_job_config(to_yaml(parse_job_config("", "j")), "j").sync, SyncConfig{});
}

TEST(JobConfigSync, ErrorsNameTheKey) {
  EXPECT_EQ(error_of("sync: {mode: local-sgd}"),
            "job.yaml:1:14: sync.mode: expected one of allreduce, local_sgd, ssp, async, got "
            "\"local-sgd\"; did you mean 'local_sgd'?");
  EXPECT_EQ(error_of("sync: {balance: yes}"),
            "job.yaml:1:17: sync.balance: expected one of off, auto, got \"yes\"");
  EXPECT_EQ(error_of("sync: {period: 4}"),
            "job.yaml:1:16: sync.period: does not apply when sync.mode is allreduce (only to "
            "local_sgd)");
  EXPECT_EQ(error_of("sync: {mode: local_sgd, period: 0}"),
            "job.yaml:1:33: sync.period: expected an integer in [1, 1048576], got 0");
  EXPECT_EQ(error_of("sync: {mode: local_sgd, outer_optimizer: {lr: 0.5}}"),
            "job.yaml:1:47: sync.outer_optimizer.lr: does not apply when "
            "sync.outer_optimizer.name is none");
  EXPECT_EQ(
      error_of("sync:\n  mode: local_sgd\n  outer_optimizer: {name: nesterov, momentum: 1}\n"),
      "job.yaml:3:47: sync.outer_optimizer.momentum: expected a number in [0, 1), got 1");
  EXPECT_EQ(error_of("", {"sync.mode=local_sgd", "sync.perod=2"}),
            "--set sync.perod=2: sync.perod: unknown key; did you mean 'period'?");
  const std::string script = std::string(COHORT_SOURCE_DIR) + "/examples/python/train_ddp.py";
  EXPECT_EQ(error_of("program: {python: " + script + "}\nsync: {mode: local_sgd}\n"),
            "job.yaml:2:14: sync.mode: does not apply to a Python program (program.python): the "
            "script's own training loop decides how its replicas synchronise");
}

TEST(JobConfigSync, ParameterServerModes) {
  JobConfig c = parse_job_config(
      "parameter_servers: 3\nsync: {mode: ssp, staleness: 2, fresh_wait: 0.25}\n", "j");
  EXPECT_EQ(c.sync.mode, SyncKind::Ssp);
  EXPECT_EQ(c.sync.staleness, 2);
  EXPECT_DOUBLE_EQ(c.sync.fresh_wait, 0.25);
  EXPECT_TRUE(c.sync.read_my_writes);  // the default
  EXPECT_EQ(c.parameter_servers, 3);
  EXPECT_TRUE(c.sync.uses_servers());
  EXPECT_EQ(parse_job_config(to_yaml(c), "j"), c);
  c = parse_job_config("parameter_servers: 2\nsync: {mode: ssp, read_my_writes: false}\n", "j");
  EXPECT_FALSE(c.sync.read_my_writes);
  EXPECT_EQ(parse_job_config(to_yaml(c), "j"), c);
  c = parse_job_config("parameter_servers: 1\nsync: {mode: async, lr_scale: inverse_staleness}\n",
                       "j");
  EXPECT_EQ(c.sync.mode, SyncKind::Async);
  EXPECT_EQ(c.sync.lr_scale, LrScale::InverseStaleness);
  EXPECT_EQ(parse_job_config(to_yaml(c), "j"), c);
  c = parse_job_config("parameter_servers: 2\nsync: {mode: async, delay_compensation: 0.1}\n", "j");
  EXPECT_DOUBLE_EQ(c.sync.delay_compensation, 0.1);
  EXPECT_EQ(parse_job_config(to_yaml(c), "j"), c);
  EXPECT_EQ(parse_job_config("", "j").parameter_servers, 0);
}

TEST(JobConfigSync, ParameterServerErrorsNameTheKey) {
  EXPECT_EQ(error_of("sync: {mode: ssp}"),
            "job.yaml:1:14: sync.mode: is ssp: the job needs parameter_servers (how many server "
            "processes hold the model; 1 keeps no copy of it, 2 or more survive the loss of one)");
  EXPECT_EQ(error_of("parameter_servers: 2"),
            "job.yaml:1:20: parameter_servers: does not apply when sync.mode is allreduce (only "
            "to ssp and async)");
  EXPECT_EQ(error_of("parameter_servers: 0\nsync: {mode: ssp}"),
            "job.yaml:1:20: parameter_servers: expected an integer in [1, 256], got 0");
  EXPECT_EQ(error_of("parameter_servers: 2\nsync: {mode: async, staleness: 3}"),
            "job.yaml:2:32: sync.staleness: does not apply when sync.mode is async (staleness is "
            "unbounded)");
  EXPECT_EQ(error_of("sync: {staleness: 3}"),
            "job.yaml:1:19: sync.staleness: does not apply when sync.mode is allreduce (only to "
            "ssp and async)");
  EXPECT_EQ(error_of("parameter_servers: 2\nsync: {mode: ssp, lr_scale: inverse_staleness, "
                     "delay_compensation: 0.1}"),
            "job.yaml:2:68: sync.delay_compensation: and sync.lr_scale: inverse_staleness are two "
            "corrections of the same staleness; choose one");
  EXPECT_EQ(error_of("parameter_servers: 2\nsync: {mode: ssp, balance: auto}"),
            "job.yaml:2:28: sync.balance: does not apply when sync.mode is ssp: a worker's "
            "pushes never wait for the others' beyond the staleness bound, so its share of the "
            "data need not shrink");
  EXPECT_EQ(error_of("parameter_servers: 2\ncomm: {compression: fp16}\nsync: {mode: async}"),
            "job.yaml:2:21: comm.compression: does not apply when sync.mode is async (pushes go "
            "to the parameter servers uncompressed)");
  EXPECT_EQ(error_of("parameter_servers: 2\nsync: {mode: ssp, staleness: -1}"),
            "job.yaml:2:30: sync.staleness: expected an integer in [0, 1048576], got -1");
  EXPECT_EQ(error_of("parameter_servers: 2\nsync: {mode: ssp, fresh_wait: 1.5}"),
            "job.yaml:2:31: sync.fresh_wait: expected a number in [0, 1] (a share of a step's "
            "time; 0: off), got 1.5");
  EXPECT_EQ(error_of("parameter_servers: 2\nsync: {mode: async, fresh_wait: 0.1}"),
            "job.yaml:2:33: sync.fresh_wait: does not apply when sync.mode is async (it never "
            "waits)");
  EXPECT_EQ(error_of("parameter_servers: 2\nsync: {mode: async, read_my_writes: true}"),
            "job.yaml:2:37: sync.read_my_writes: does not apply when sync.mode is async (a push "
            "is applied before its pull is answered)");
  EXPECT_EQ(error_of("parameter_servers: 2\nsync: {mode: ssp, read_my_writes: 2}"),
            "job.yaml:2:35: sync.read_my_writes: expected true or false, got 2");
  EXPECT_EQ(error_of("sync: {read_my_writes: false}"),
            "job.yaml:1:24: sync.read_my_writes: does not apply when sync.mode is allreduce (only "
            "to ssp)");
}

TEST(YamlReader, EditDistanceAndClosestMatch) {
  EXPECT_EQ(edit_distance("batchsize", "batch_size"), 1u);
  EXPECT_EQ(edit_distance("bacth", "batch"), 1u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(closest_match("epoch", {"epochs", "seed"}), "epochs");
  EXPECT_EQ(closest_match("xyz", {"epochs", "seed"}), std::nullopt);
  EXPECT_EQ(closest_match("lr", {"seed", "eps"}), std::nullopt);
}

}  // namespace
}  // namespace cohort::train
