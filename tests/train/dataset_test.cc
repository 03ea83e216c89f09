#include "cohort/train/dataset.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <numeric>

#include "cohort/train/models.h"
#include "cohort/train/sampler.h"

namespace cohort::train {
namespace {

namespace fs = std::filesystem;
const std::string kFashion = "/usr/share/datasets/fashion-mnist";

// Trains `model` for `steps` steps of `batch` samples drawn by a one-rank DistributedSampler;
// returns the accuracy on `test`.
double train_and_evaluate(Model& model, const Dataset& train, const Dataset& test, int steps,
                          int64_t batch, double lr) {
  auto opt =
      make_optimizer({.name = OptimizerKind::Sgd, .lr = lr, .momentum = 0.9}, model.parameters());
  DistributedSampler sampler({.dataset_size = train.size(), .batch_size = batch, .seed = 1});
  model.train();
  for (int s = 0; s < steps; ++s) {
    auto b = sampler.next();
    if (!b) {
      sampler.reset(sampler.epoch() + 1);
      b = sampler.next();
    }
    auto [x, y] = train.batch(b->indices);
    opt->zero_grad();
    torch::nn::functional::cross_entropy(model.forward(x), y).backward();
    opt->step();
  }
  torch::NoGradGuard no_grad;
  model.eval();
  std::vector<int64_t> all(static_cast<size_t>(test.size()));
  std::iota(all.begin(), all.end(), 0);
  torch::Tensor predicted = model.forward(test.batch(all).first).argmax(1);
  return predicted.eq(test.labels).to(torch::kFloat64).mean().item<double>();
}

class FashionMnist : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    torch::set_num_threads(1);
    if (!fs::exists(kFashion)) return;
    train_ = new Dataset(load_idx_dataset(kFashion, Split::Train));
    test_ = new Dataset(load_idx_dataset(kFashion, Split::Test));
  }
  static void TearDownTestSuite() {
    delete train_;
    delete test_;
    train_ = test_ = nullptr;
  }
  void SetUp() override {
    if (!train_) GTEST_SKIP() << kFashion << " is not installed";
  }
  static Dataset* train_;
  static Dataset* test_;
};
Dataset* FashionMnist::train_ = nullptr;
Dataset* FashionMnist::test_ = nullptr;

// Kept as the files' bytes (a quarter of the memory of floats); a batch is scaled to [0, 1].
TEST_F(FashionMnist, KeepsTheBytesAndHandsOutScaledFloatBatches) {
  EXPECT_EQ(train_->size(), 60000);
  EXPECT_EQ(test_->size(), 10000);
  EXPECT_EQ(train_->images.sizes(), (std::vector<int64_t>{60000, 1, 28, 28}));
  EXPECT_EQ(train_->images.dtype(), torch::kUInt8);
  EXPECT_EQ(train_->labels.dtype(), torch::kInt64);
  IdxSplit raw = read_idx_split(kFashion, Split::Test);
  EXPECT_EQ(test_->labels[123].item<int64_t>(), raw.labels.data[123]);
  auto [x, y] = test_->batch({5, 7});
  EXPECT_EQ(x.dtype(), torch::kFloat32);
  EXPECT_EQ(x.min().item<float>(), 0.0f);
  EXPECT_LE(x.max().item<float>(), 1.0f);
  // Pixels are the file's bytes / 255, computed as float32 division (what training always saw).
  EXPECT_EQ(x[0][0][14][14].item<float>(),
            static_cast<float>(raw.images.data[5 * 784 + 14 * 28 + 14]) / 255.0f);
  EXPECT_TRUE(torch::equal(x[1], test_->images[7].to(torch::kFloat32).div(255.0f)));
}

TEST_F(FashionMnist, BatchSelectsTheSampledRows) {
  auto [x, y] = train_->batch({5, 0, 59999});
  EXPECT_EQ(x.sizes(), (std::vector<int64_t>{3, 1, 28, 28}));
  EXPECT_TRUE(torch::equal(x[0], train_->images[5].to(torch::kFloat32).div(255.0f)));
  EXPECT_TRUE(torch::equal(x[2], train_->images[59999].to(torch::kFloat32).div(255.0f)));
  EXPECT_EQ(y[1].item<int64_t>(), train_->labels[0].item<int64_t>());
  auto [ex, ey] = train_->batch({});
  EXPECT_EQ(ex.sizes(), (std::vector<int64_t>{0, 1, 28, 28}));
  EXPECT_EQ(ey.numel(), 0);
}

TEST_F(FashionMnist, MlpLearnsIt) {
  // 300 steps of 64 (a third of an epoch) reach well above the 10% of chance.
  ModelPtr m = make_model({.name = ModelKind::Mlp}, {.shape = {1, 28, 28}, .classes = 10}, 0);
  double acc = train_and_evaluate(*m, *train_, *test_, 300, 64, 0.05);
  EXPECT_GT(acc, 0.75);
}

TEST(Dataset, CorruptFilesFailWithTheFileName) {
  fs::path dir = fs::temp_directory_path() / ("cohort_ds_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "train-images-idx3-ubyte", std::ios::binary).write("\0\0\x08\x01", 4);
  std::ofstream(dir / "train-labels-idx1-ubyte", std::ios::binary).write("\0\0\x08\x01\0\0\0\0", 8);
  try {
    load_idx_dataset(dir.string(), Split::Train);
    FAIL() << "expected a DatasetError";
  } catch (const DatasetError& e) {
    EXPECT_NE(std::string(e.what()).find((dir / "train-images-idx3-ubyte").string() +
                                         ": bad magic number"),
              std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

TEST(Synthetic, ShapesAndDeterminism) {
  SyntheticOptions o{.samples = 200, .shape = {3, 8, 6}, .classes = 7, .seed = 4};
  Dataset a = make_synthetic(o, Split::Train);
  EXPECT_EQ(a.images.sizes(), (std::vector<int64_t>{200, 3, 8, 6}));
  EXPECT_EQ(a.labels.sizes(), (std::vector<int64_t>{200}));
  EXPECT_GE(a.labels.min().item<int64_t>(), 0);
  EXPECT_LT(a.labels.max().item<int64_t>(), 7);
  Dataset b = make_synthetic(o, Split::Train);
  EXPECT_TRUE(torch::equal(a.images, b.images));
  EXPECT_TRUE(torch::equal(a.labels, b.labels));
  Dataset test = make_synthetic(o, Split::Test);
  EXPECT_EQ(test.size(), 40);
  o.seed = 5;
  EXPECT_FALSE(torch::equal(make_synthetic(o, Split::Train).images, a.images));
}

TEST(Synthetic, IsLearnable) {
  torch::set_num_threads(1);
  DataConfig d{.name = DatasetKind::Synthetic, .samples = 2000, .shape = {1, 12, 12}, .classes = 5};
  Dataset train = load_dataset(d, Split::Train, 9);
  Dataset test = load_dataset(d, Split::Test, 9);
  ModelPtr m = make_model({.name = ModelKind::Mlp}, input_spec(d), 0);
  EXPECT_GT(train_and_evaluate(*m, train, test, 100, 32, 0.01), 0.9);
}

}  // namespace
}  // namespace cohort::train
