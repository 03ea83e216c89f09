#include "cohort/train/checkpoint.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>

#include "cohort/base/bytes.h"
#include "cohort/base/checksum.h"
#include "cohort/base/file.h"
#include "cohort/train/models.h"
#include "model_state.h"

namespace cohort::train {
namespace {

namespace fs = std::filesystem;
const InputSpec kMnist{.shape = {1, 28, 28}, .classes = 10};

using testing::expect_same_state;
using testing::train_steps;

class Checkpoints : public ::testing::Test {
 protected:
  void SetUp() override {
    torch::set_num_threads(1);
    dir_ = fs::temp_directory_path() /
           ("cohort_ckpt_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A small trained model and optimizer, and a checkpoint of them at `path`.
  void make_checkpoint(const fs::path& path, int64_t step = 3) {
    model_ = make_model({.name = ModelKind::Mlp}, kMnist, 1);
    opt_ = make_optimizer({.name = OptimizerKind::Sgd, .lr = 0.01}, model_->parameters());
    train_steps(*model_, *opt_, 2, 5);
    save_checkpoint(path, {.step = step, .epoch = 1, .consumed = 96, .job = "t"}, *model_,
                    opt_.get());
  }
  std::string error_loading(const fs::path& path) {
    ModelPtr m = make_model({.name = ModelKind::Mlp}, kMnist, 2);
    try {
      load_checkpoint(path, *m, nullptr);
    } catch (const CheckpointError& e) {
      return e.what();
    }
    return "";
  }
  static void flip_byte(const fs::path& path, size_t offset) {
    std::string bytes = read_file(path);
    bytes.at(offset) ^= 0x10;
    write_file_atomically(path, bytes);
  }

  fs::path dir_;
  ModelPtr model_;
  std::unique_ptr<torch::optim::Optimizer> opt_;
};

TEST_F(Checkpoints, RoundTripIsBitwiseAndTrainingContinuesIdentically) {
  for (OptimizerKind kind : {OptimizerKind::Sgd, OptimizerKind::Adam}) {
    // ResNet: parameters and BatchNorm buffers; SGD momentum buffers or Adam moments.
    ModelPtr a = make_model({.name = ModelKind::ResNet}, kMnist, 1);
    OptimizerConfig oc{.name = kind, .lr = 0.01};
    auto opt_a = make_optimizer(oc, a->parameters());
    train_steps(*a, *opt_a, 3, 11);
    const CheckpointMeta meta{.step = 3,
                              .epoch = 2,
                              .consumed = 24,
                              .world_size = 4,
                              .seed = 9,
                              .job = "fashion",
                              .time = 1.5};
    const fs::path path = dir_ / "a.cohort";
    save_checkpoint(path, meta, *a, opt_a.get());
    const float next_random = torch::rand({1}).item<float>();

    ModelPtr b = make_model({.name = ModelKind::ResNet}, kMnist, 2);  // different weights
    auto opt_b = make_optimizer(oc, b->parameters());
    (void)torch::rand({17});
    EXPECT_EQ(load_checkpoint(path, *b, opt_b.get()), meta);
    expect_same_state(*a, *b);
    // The CPU generator is back where it was when the checkpoint was written.
    EXPECT_EQ(torch::rand({1}).item<float>(), next_random);
    // Optimizer state came back too: the next steps stay bitwise equal.
    train_steps(*a, *opt_a, 2, 12);
    train_steps(*b, *opt_b, 2, 12);
    expect_same_state(*a, *b);
    // The optimizer keeps pointing at the model's (same) parameter tensors.
    EXPECT_TRUE(opt_b->param_groups()[0].params()[0].is_same(b->parameters()[0]));
  }
}

// Each rank's codec state, the synchronization mode's state and the committed sample counts
// (opaque bytes, zeros and all) come back as they went in; a checkpoint written without any gives
// none back.
TEST_F(Checkpoints, CodecAndSyncStatesRoundTrip) {
  const std::vector<std::string> states = {std::string("rank 0\0\x01\xff", 10), "",
                                           std::string(100000, '\x7f')};
  const fs::path with = dir_ / "with.cohort", without = dir_ / "without.cohort";
  make_checkpoint(dir_ / "first.cohort");
  const CheckpointExtras extras{.codec_states = states,
                                .sync_state = std::string("outer\0momentum", 14),
                                .train_state = R"({"counts":[[60000,1.8e9,7.2e13]]})"};
  save_checkpoint(with, {.step = 1}, *model_, opt_.get(), extras);
  save_checkpoint(without, {.step = 1}, *model_, opt_.get());
  CheckpointExtras back{.codec_states = {"stale"}, .sync_state = "stale", .train_state = "stale"};
  decode_checkpoint(read_file(with), "with", *model_, opt_.get(), true, &back);
  EXPECT_EQ(back, extras);
  decode_checkpoint(read_file(without), "without", *model_, opt_.get(), true, &back);
  EXPECT_EQ(back, CheckpointExtras{});
}

// Found by fuzzing the format: a checksum-valid file whose metadata has 1e19 (a float) for an
// integer was converted unchecked (undefined behaviour); now it is refused by name.
TEST_F(Checkpoints, MetadataNumbersMustBeIntegersInRange) {
  auto framed = [](const std::string& meta) {
    const Digest d = sha256(meta.data(), meta.size());
    ByteWriter w;
    w.put_bytes("COHORTCK", 8)
        .put<uint32_t>(1)
        .put<uint32_t>(static_cast<uint32_t>(meta.size()))
        .put<uint64_t>(0)
        .put_bytes(d.data(), d.size());
    return std::string(w.bytes().begin(), w.bytes().end()) + meta;
  };
  const std::string rest = R"("epoch": 0, "consumed": 0, "world_size": 1, "job": "j", "time": 1)";
  auto error = [&](const std::string& fields) {
    try {
      verify_checkpoint(framed("{" + fields + ", " + rest + "}"), "f.cohort");
    } catch (const CheckpointError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error(R"("step": 1e19, "seed": 1)"),
            "f.cohort: unreadable metadata: step is not an integer");
  EXPECT_EQ(error(R"("step": 1, "seed": -3)"), "f.cohort: unreadable metadata: seed is negative");
  EXPECT_EQ(error(R"("step": 1, "seed": 18446744073709551615)"), "");
}

TEST_F(Checkpoints, MetadataWithoutAModel) {
  make_checkpoint(dir_ / "m.cohort", 42);
  CheckpointMeta meta = read_checkpoint_meta(dir_ / "m.cohort");
  EXPECT_EQ(meta.step, 42);
  EXPECT_EQ(meta.consumed, 96);
  EXPECT_EQ(meta.job, "t");
}

TEST_F(Checkpoints, FlippedByteIsDetected) {
  const fs::path path = dir_ / "f.cohort";
  // In the metadata, in the middle of the tensors, in the last byte. (Sizes are taken afresh for
  // each file: libtorch numbers the class names in an archive per process, so two checkpoints of
  // the same model can differ in length by a few bytes.)
  for (int where = 0; where < 3; ++where) {
    make_checkpoint(path);
    const size_t size = fs::file_size(path);
    const size_t offset = where == 0 ? 60 : where == 1 ? size / 2 : size - 1;
    flip_byte(path, offset);
    EXPECT_EQ(error_loading(path),
              path.string() + ": corrupt: the SHA-256 checksum does not match the contents")
        << "offset " << offset;
  }
  make_checkpoint(path);
  flip_byte(path, 0);
  EXPECT_EQ(error_loading(path), path.string() + ": not a Cohort checkpoint (bad magic)");
  make_checkpoint(path);
  flip_byte(path, 17);  // payload length
  EXPECT_NE(error_loading(path).find(path.string() + ": truncated or corrupt: the header promises"),
            std::string::npos);
}

TEST_F(Checkpoints, TruncatedFileIsDetected) {
  const fs::path path = dir_ / "t.cohort";
  make_checkpoint(path);
  const size_t size = fs::file_size(path);
  fs::resize_file(path, size - 100);
  EXPECT_EQ(error_loading(path), path.string() + ": truncated or corrupt: the header promises " +
                                     std::to_string(size) + " bytes, the file has " +
                                     std::to_string(size - 100));
  fs::resize_file(path, 20);
  EXPECT_EQ(error_loading(path),
            path.string() + ": truncated: 20 bytes, shorter than the 56-byte header");
}

TEST_F(Checkpoints, ALayoutLoadsIntoTheOther) {
  // A channels-last cnn's checkpoint loads into a contiguous one and back, weights unchanged.
  ModelPtr nhwc = make_model({.name = ModelKind::Cnn}, kMnist, 4);
  auto opt = make_optimizer({.name = OptimizerKind::Sgd, .lr = 0.01}, nhwc->parameters());
  train_steps(*nhwc, *opt, 1, 4);
  const fs::path path = dir_ / "cnn.cohort";
  save_checkpoint(path, {.step = 1, .epoch = 0, .consumed = 4, .job = "t"}, *nhwc, nullptr);
  ModelPtr nchw =
      make_model({.name = ModelKind::Cnn, .memory_format = MemoryFormat::Contiguous}, kMnist, 9);
  load_checkpoint(path, *nchw, nullptr);
  expect_same_state(*nhwc, *nchw);
  save_checkpoint(path, {.step = 1, .epoch = 0, .consumed = 4, .job = "t"}, *nchw, nullptr);
  ModelPtr again = make_model({.name = ModelKind::Cnn}, kMnist, 9);
  load_checkpoint(path, *again, nullptr);
  expect_same_state(*nhwc, *again);
  for (const auto& p : again->parameters()) {
    if (p.dim() == 4) {
      EXPECT_TRUE(p.is_contiguous(torch::MemoryFormat::ChannelsLast));  // still its own layout
    }
  }
}

TEST_F(Checkpoints, AnotherModelDoesNotFit) {
  const fs::path path = dir_ / "mlp.cohort";
  make_checkpoint(path);  // an mlp for 28x28 images
  auto error = [&](Model& m) {
    try {
      load_checkpoint(path, m, nullptr);
    } catch (const CheckpointError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  ModelPtr cnn = make_model({.name = ModelKind::Cnn}, kMnist, 0);
  EXPECT_EQ(error(*cnn), path.string() +
                             ": has no parameter 'layers.0.weight' (a checkpoint of "
                             "another model?)");
  ModelPtr small = make_model({.name = ModelKind::Mlp}, {.shape = {1, 14, 14}, .classes = 10}, 0);
  EXPECT_EQ(error(*small), path.string() +
                               ": 'layers.1.weight' is [256, 784] float in the "
                               "checkpoint, [256, 196] float in the model");
}

TEST_F(Checkpoints, DirectoryKeepsTheNewestAndSkipsCorruptOnes) {
  CheckpointDir ckpts(dir_ / "run", 3);
  EXPECT_TRUE(ckpts.list().empty());
  EXPECT_FALSE(ckpts.newest_valid().has_value());
  ModelPtr m = make_model({.name = ModelKind::Mlp}, kMnist, 1);
  auto opt = make_optimizer({}, m->parameters());
  for (int64_t step : {100, 200, 300, 400, 500}) {
    EXPECT_EQ(ckpts.save({.step = step}, *m, opt.get()), ckpts.path_for(step));
  }
  std::vector<int64_t> steps;
  for (const auto& f : ckpts.list()) steps.push_back(f.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{300, 400, 500}));
  // Only checkpoints in the directory: no temporary files are left behind.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_ / "run"), fs::directory_iterator()), 3);
  EXPECT_EQ(ckpts.path_for(500).filename(), "ckpt-000000000500.cohort");

  EXPECT_EQ(ckpts.newest_valid()->step, 500);
  flip_byte(ckpts.path_for(500), fs::file_size(ckpts.path_for(500)) / 2);
  std::vector<std::string> skipped;
  auto newest = ckpts.newest_valid(&skipped);
  ASSERT_TRUE(newest.has_value());
  EXPECT_EQ(newest->step, 400);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0].rfind(ckpts.path_for(500).string() + ": corrupt", 0), 0u) << skipped[0];
  fs::resize_file(ckpts.path_for(400), 10);
  fs::resize_file(ckpts.path_for(300), 1000);
  EXPECT_FALSE(ckpts.newest_valid().has_value());
}

// A run resumed from an older checkpoint, because the newer ones are corrupt, writes into the
// same directory: rotation keeps what it writes and what it resumed from, not the corrupt files
// of later steps (which it replaces as their steps come).
TEST_F(Checkpoints, RotationAfterAResumePastCorruptOnesKeepsTheValidOnes) {
  ModelPtr m = make_model({.name = ModelKind::Mlp}, kMnist, 1);
  auto opt = make_optimizer({}, m->parameters());
  CheckpointDir before(dir_ / "run", 3);
  for (int64_t step : {300, 400, 500}) before.save({.step = step}, *m, opt.get());
  // The run resumed, keeping two.
  CheckpointDir ckpts(dir_ / "run", 2);
  flip_byte(ckpts.path_for(500), fs::file_size(ckpts.path_for(500)) / 2);
  flip_byte(ckpts.path_for(400), fs::file_size(ckpts.path_for(400)) / 2);
  ASSERT_EQ(ckpts.newest_valid()->step, 300);
  ckpts.save({.step = 310}, *m, opt.get());
  std::vector<int64_t> steps;
  for (const auto& f : ckpts.list()) steps.push_back(f.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{300, 310, 400, 500}));
  EXPECT_EQ(ckpts.newest_valid()->step, 310);
  ckpts.save({.step = 320}, *m, opt.get());
  steps.clear();
  for (const auto& f : ckpts.list()) steps.push_back(f.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{310, 320, 400, 500}));
  ckpts.save({.step = 400}, *m, opt.get());  // replaces the corrupt one
  EXPECT_EQ(ckpts.newest_valid()->step, 400);
}

TEST_F(Checkpoints, InMemorySnapshotHasTheFileFormat) {
  ModelPtr a = make_model({.name = ModelKind::Mlp}, kMnist, 1);
  std::string bytes = encode_checkpoint({.step = 7}, *a, nullptr);
  EXPECT_EQ(verify_checkpoint(bytes, "snapshot").step, 7);
  ModelPtr b = make_model({.name = ModelKind::Mlp}, kMnist, 2);
  decode_checkpoint(bytes, "snapshot", *b, nullptr, /*restore_rng=*/false);
  expect_same_state(*a, *b);
  // Without optimizer state in it, asking for one is an error, and the model is left as it was.
  ModelPtr c = make_model({.name = ModelKind::Mlp}, kMnist, 3);
  ModelPtr same_as_c = make_model({.name = ModelKind::Mlp}, kMnist, 3);
  auto opt = make_optimizer({}, c->parameters());
  EXPECT_THROW(decode_checkpoint(bytes, "snapshot", *c, opt.get()), CheckpointError);
  expect_same_state(*c, *same_as_c);
}

}  // namespace
}  // namespace cohort::train
