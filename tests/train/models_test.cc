#include "cohort/train/models.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <thread>

#include "cohort/train/schedule.h"

namespace cohort::train {
namespace {

const InputSpec kMnist{.shape = {1, 28, 28}, .classes = 10};

std::vector<std::vector<int64_t>> parameter_shapes(torch::nn::Module& m) {
  std::vector<std::vector<int64_t>> out;
  for (const auto& p : m.parameters()) out.push_back(p.sizes().vec());
  return out;
}

bool same_parameters(torch::nn::Module& a, torch::nn::Module& b) {
  auto pa = a.parameters(), pb = b.parameters();
  if (pa.size() != pb.size()) return false;
  for (size_t i = 0; i < pa.size(); ++i) {
    if (!torch::equal(pa[i], pb[i])) return false;
  }
  return true;
}

class Models : public ::testing::Test {
 protected:
  void SetUp() override { torch::set_num_threads(1); }
};

TEST_F(Models, MlpIsExactly784_256_128_10) {
  ModelPtr m = make_model({.name = ModelKind::Mlp}, kMnist, 0);
  EXPECT_EQ(parameter_shapes(*m), (std::vector<std::vector<int64_t>>{
                                      {256, 784}, {256}, {128, 256}, {128}, {10, 128}, {10}}));
  EXPECT_EQ(m->forward(torch::zeros({3, 1, 28, 28})).sizes(), (std::vector<int64_t>{3, 10}));
}

TEST_F(Models, CnnHasTheDocumentedLayers) {
  ModelPtr m = make_model({.name = ModelKind::Cnn}, kMnist, 0);
  EXPECT_EQ(parameter_shapes(*m),
            (std::vector<std::vector<int64_t>>{
                {32, 1, 5, 5}, {32}, {64, 32, 5, 5}, {64}, {128, 3136}, {128}, {10, 128}, {10}}));
  EXPECT_EQ(m->forward(torch::zeros({2, 1, 28, 28})).sizes(), (std::vector<int64_t>{2, 10}));
  // Other shapes: the first linear layer follows the image size.
  ModelPtr rgb = make_model({.name = ModelKind::Cnn}, {.shape = {3, 32, 32}, .classes = 5}, 0);
  EXPECT_EQ(rgb->forward(torch::zeros({1, 3, 32, 32})).sizes(), (std::vector<int64_t>{1, 5}));
}

TEST_F(Models, ConvolutionalModelsRunChannelsLastUnlessToldOtherwise) {
  torch::manual_seed(1);
  const torch::Tensor x = torch::rand({8, 1, 28, 28});
  for (ModelKind kind : {ModelKind::Cnn, ModelKind::ResNet}) {
    ModelPtr fast = make_model({.name = kind}, kMnist, 5);
    ModelPtr plain =
        make_model({.name = kind, .memory_format = MemoryFormat::Contiguous}, kMnist, 5);
    EXPECT_EQ(fast->memory_format(), MemoryFormat::ChannelsLast) << model_kind_name(kind);
    EXPECT_EQ(plain->memory_format(), MemoryFormat::Contiguous) << model_kind_name(kind);
    // The same weights in another layout.
    EXPECT_TRUE(same_parameters(*fast, *plain)) << model_kind_name(kind);
    // Every 4-D weight has channels-last strides, also those whose layout is ambiguous (one
    // input channel, a 1x1 kernel): libtorch picks a convolution's layout from its strides.
    for (const auto& p : fast->parameters()) {
      if (p.dim() != 4) continue;
      EXPECT_EQ(p.suggest_memory_format(), torch::MemoryFormat::ChannelsLast)
          << model_kind_name(kind) << " " << p.sizes();
    }
    // The same function, up to the rounding of another order of summation; and gradients that
    // keep the parameters' layout.
    auto y_fast = fast->forward(x), y_plain = plain->forward(x);
    EXPECT_TRUE(torch::allclose(y_fast, y_plain, 1e-4, 1e-5)) << model_kind_name(kind);
    if (kind == ModelKind::Cnn) {
      // The first convolution (one input channel) already runs channels-last.
      torch::nn::Conv2dImpl* first = nullptr;
      for (const auto& m : fast->modules(false)) {
        if ((first = m->as<torch::nn::Conv2d>())) break;
      }
      ASSERT_NE(first, nullptr);
      EXPECT_EQ(first->forward(fast->in_layout(x)).suggest_memory_format(),
                torch::MemoryFormat::ChannelsLast);
    }
    y_fast.sum().backward();
    for (const auto& p : fast->parameters()) {
      if (p.dim() == 4) {
        EXPECT_TRUE(p.grad().is_contiguous(torch::MemoryFormat::ChannelsLast));
      }
    }
  }
  ModelPtr mlp = make_model({.name = ModelKind::Mlp}, kMnist, 5);
  EXPECT_EQ(mlp->memory_format(), MemoryFormat::Contiguous);
}

TEST_F(Models, ResNetHasThreeStagesWithBatchNorm) {
  ModelPtr m = make_model({.name = ModelKind::ResNet}, kMnist, 0);
  int convs = 0, norms = 0;
  for (const auto& mod : m->modules(false)) {
    if (mod->as<torch::nn::Conv2d>()) ++convs;
    if (mod->as<torch::nn::BatchNorm2d>()) ++norms;
  }
  // Stem + 6 blocks x 2 + 2 projection shortcuts (16->32, 32->64).
  EXPECT_EQ(convs, 15);
  EXPECT_EQ(norms, 15);
  EXPECT_FALSE(m->buffers().empty());  // running statistics
  EXPECT_EQ(m->forward(torch::randn({4, 1, 28, 28})).sizes(), (std::vector<int64_t>{4, 10}));
  ModelPtr wide =
      make_model({.name = ModelKind::ResNet}, {.shape = {3, 32, 32}, .classes = 100}, 0);
  EXPECT_EQ(wide->forward(torch::randn({2, 3, 32, 32})).sizes(), (std::vector<int64_t>{2, 100}));
}

TEST_F(Models, InitialisationIsAFunctionOfTheSeed) {
  for (ModelKind kind : {ModelKind::Mlp, ModelKind::Cnn, ModelKind::ResNet}) {
    ModelPtr a = make_model({.name = kind}, kMnist, 7);
    ModelPtr b = make_model({.name = kind}, kMnist, 7);
    ModelPtr c = make_model({.name = kind}, kMnist, 8);
    EXPECT_TRUE(same_parameters(*a, *b)) << model_kind_name(kind);
    EXPECT_FALSE(same_parameters(*a, *c)) << model_kind_name(kind);
  }
  // The process-wide generator plays no part: drawing from it between builds changes nothing,
  // and threads building at the same time get the same weights.
  ModelPtr before = make_model({.name = ModelKind::Cnn}, kMnist, 3);
  (void)torch::rand({100});
  std::vector<ModelPtr> built(4);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < built.size(); ++i) {
    threads.emplace_back([&, i] { built[i] = make_model({.name = ModelKind::Cnn}, kMnist, 3); });
  }
  for (auto& t : threads) t.join();
  for (auto& m : built) EXPECT_TRUE(same_parameters(*before, *m));
}

TEST_F(Models, InitialWeightsFollowTheFanInBound) {
  ModelPtr m = make_model({.name = ModelKind::Cnn}, kMnist, 1);
  for (const auto& mod : m->modules(false)) {
    torch::Tensor w;
    if (auto* l = mod->as<torch::nn::Linear>()) w = l->weight;
    if (auto* c = mod->as<torch::nn::Conv2d>()) w = c->weight;
    if (!w.defined()) continue;
    const double bound = 1.0 / std::sqrt(static_cast<double>(w.numel() / w.size(0)));
    EXPECT_LE(w.abs().max().item<double>(), bound);
    EXPECT_GT(w.abs().max().item<double>(), 0.9 * bound);  // uses the whole range
  }
}

TEST_F(Models, OptimizerFactory) {
  ModelPtr m = make_model({.name = ModelKind::Mlp}, kMnist, 0);
  auto sgd =
      make_optimizer({.name = OptimizerKind::Sgd, .lr = 0.1, .momentum = 0.5, .weight_decay = 0.01},
                     m->parameters());
  auto& so = static_cast<torch::optim::SGDOptions&>(sgd->param_groups()[0].options());
  EXPECT_DOUBLE_EQ(so.lr(), 0.1);
  EXPECT_DOUBLE_EQ(so.momentum(), 0.5);
  EXPECT_DOUBLE_EQ(so.weight_decay(), 0.01);
  set_learning_rate(*sgd, 0.25);
  EXPECT_DOUBLE_EQ(learning_rate(*sgd), 0.25);

  auto adam =
      make_optimizer({.name = OptimizerKind::Adam, .lr = 0.002, .betas = {0.8, 0.95}, .eps = 1e-7},
                     m->parameters());
  auto* ao = dynamic_cast<torch::optim::AdamOptions*>(&adam->param_groups()[0].options());
  ASSERT_NE(ao, nullptr);
  EXPECT_DOUBLE_EQ(ao->lr(), 0.002);
  EXPECT_DOUBLE_EQ(std::get<0>(ao->betas()), 0.8);
  EXPECT_DOUBLE_EQ(std::get<1>(ao->betas()), 0.95);
  EXPECT_DOUBLE_EQ(ao->eps(), 1e-7);
}

TEST_F(Models, OneSgdStepLowersTheLossOfItsBatch) {
  for (ModelKind kind : {ModelKind::Mlp, ModelKind::Cnn, ModelKind::ResNet}) {
    ModelPtr m = make_model({.name = kind}, kMnist, 2);
    auto opt =
        make_optimizer({.name = OptimizerKind::Sgd, .lr = 0.01, .momentum = 0}, m->parameters());
    torch::manual_seed(0);
    torch::Tensor x = torch::rand({16, 1, 28, 28});
    torch::Tensor y = torch::randint(0, 10, {16}, torch::kInt64);
    m->train();
    torch::Tensor before = torch::nn::functional::cross_entropy(m->forward(x), y);
    opt->zero_grad();
    before.backward();
    opt->step();
    torch::Tensor after = torch::nn::functional::cross_entropy(m->forward(x), y);
    EXPECT_LT(after.item<double>(), before.item<double>()) << model_kind_name(kind);
  }
}

TEST(LrSchedule, WarmupAndLinearScaling) {
  OptimizerConfig opt{.lr = 0.1};
  LrSchedule flat(opt, {.warmup_steps = 0, .scaling = LrScaling::None}, 4);
  EXPECT_DOUBLE_EQ(flat.at(0), 0.1);
  EXPECT_DOUBLE_EQ(flat.at(1000), 0.1);
  LrSchedule scaled(opt, {.warmup_steps = 4, .scaling = LrScaling::Linear}, 4);
  EXPECT_DOUBLE_EQ(scaled.peak(), 0.4);
  EXPECT_DOUBLE_EQ(scaled.at(0), 0.1);
  EXPECT_DOUBLE_EQ(scaled.at(1), 0.2);
  EXPECT_DOUBLE_EQ(scaled.at(2), 0.3);
  EXPECT_DOUBLE_EQ(scaled.at(3), 0.4);
  EXPECT_DOUBLE_EQ(scaled.at(50), 0.4);
  // A new world size after a membership change: same step count, new peak.
  LrSchedule smaller(opt, {.warmup_steps = 4, .scaling = LrScaling::Linear}, 2);
  EXPECT_DOUBLE_EQ(smaller.at(50), 0.2);
}

}  // namespace
}  // namespace cohort::train
