#include "cohort/train/snapshot.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "cohort/train/checkpoint.h"
#include "cohort/train/models.h"
#include "model_state.h"

namespace cohort::train {
namespace {

const InputSpec kMnist{.shape = {1, 28, 28}, .classes = 10};

using testing::expect_same_state;
using testing::train_steps;

// A ResNet (parameters and BatchNorm buffers) and its optimizer.
struct Trained {
  ModelPtr model;
  std::unique_ptr<torch::optim::Optimizer> opt;
  Trained(OptimizerKind kind, uint64_t seed)
      : model(make_model({.name = ModelKind::ResNet}, kMnist, seed)),
        opt(make_optimizer({.name = kind, .lr = 0.01}, model->parameters())) {}
};

TEST(StateCopy, RestoresModelOptimizerAndGeneratorInPlaceAndTrainingContinuesIdentically) {
  for (OptimizerKind kind : {OptimizerKind::Sgd, OptimizerKind::Adam}) {
    SCOPED_TRACE(kind == OptimizerKind::Sgd ? "sgd" : "adam");
    // a is snapshotted after 3 steps and trains on; b stops at 3 steps (the reference).
    Trained a(kind, 1), b(kind, 1);
    train_steps(*a.model, *a.opt, 3, 11);
    train_steps(*b.model, *b.opt, 3, 11);
    StateCopy copy;
    copy.capture(*a.model, a.opt.get());
    const float next_random = torch::rand({1}).item<float>();
    const torch::Tensor first = a.model->parameters()[0];
    const void* first_data = first.data_ptr();

    train_steps(*a.model, *a.opt, 4, 12);  // moves parameters, BatchNorm buffers, moments
    set_learning_rate(*a.opt, 0.5);
    (void)torch::rand({17});
    copy.restore(*a.model, a.opt.get());

    expect_same_state(*a.model, *b.model);
    EXPECT_EQ(learning_rate(*a.opt), 0.01);
    EXPECT_EQ(torch::rand({1}).item<float>(), next_random);
    // Written in place: the optimizer and anything else holding the parameters still do.
    EXPECT_EQ(a.model->parameters()[0].data_ptr(), first_data);
    EXPECT_TRUE(a.opt->param_groups()[0].params()[0].is_same(first));
    // The optimizer's state came back too (momentum, Adam's moments and step counts): the next
    // steps stay bitwise equal to the reference's.
    train_steps(*a.model, *a.opt, 2, 13);
    train_steps(*b.model, *b.opt, 2, 13);
    expect_same_state(*a.model, *b.model);
  }
}

TEST(StateCopy, TheCopySharesNoTensorWithTheModelOrTheOptimizer) {
  Trained a(OptimizerKind::Sgd, 1), b(OptimizerKind::Sgd, 1);
  train_steps(*a.model, *a.opt, 2, 11);
  train_steps(*b.model, *b.opt, 2, 11);
  StateCopy copy;
  copy.capture(*a.model, a.opt.get());
  // Restored, trained on and restored again: the second restore still gives the state captured
  // (training after the first restore did not write into the copy's tensors).
  copy.restore(*a.model, a.opt.get());
  train_steps(*a.model, *a.opt, 3, 12);
  copy.restore(*a.model, a.opt.get());
  train_steps(*a.model, *a.opt, 1, 13);
  train_steps(*b.model, *b.opt, 1, 13);
  expect_same_state(*a.model, *b.model);
}

TEST(StateCopy, AParameterWithoutOptimizerStateWhenCapturedHasNoneAfterARestore) {
  Trained a(OptimizerKind::Sgd, 1), b(OptimizerKind::Sgd, 1);
  StateCopy copy;
  copy.capture(*a.model, a.opt.get());  // before the first step: no momentum yet
  train_steps(*a.model, *a.opt, 2, 11);
  ASSERT_FALSE(a.opt->state().empty());
  copy.restore(*a.model, a.opt.get());
  EXPECT_TRUE(a.opt->state().empty());
  train_steps(*a.model, *a.opt, 2, 12);
  train_steps(*b.model, *b.opt, 2, 12);
  expect_same_state(*a.model, *b.model);
}

TEST(StateCopy, ACopyTakenAgainReusesItsBuffersAndHoldsTheNewState) {
  Trained a(OptimizerKind::Adam, 1), b(OptimizerKind::Adam, 1);
  StateCopy copy;
  copy.capture(*a.model, a.opt.get());
  train_steps(*a.model, *a.opt, 2, 11);
  train_steps(*b.model, *b.opt, 2, 11);
  copy.capture(*a.model, a.opt.get());  // over the first: now with Adam's moments
  train_steps(*a.model, *a.opt, 2, 12);
  copy.restore(*a.model, a.opt.get());
  train_steps(*a.model, *a.opt, 1, 13);
  train_steps(*b.model, *b.opt, 1, 13);
  expect_same_state(*a.model, *b.model);
}

TEST(StateCopy, ACopyRestoredIntoAnotherModelIsRefused) {
  Trained a(OptimizerKind::Sgd, 1);
  ModelPtr mlp = make_model({.name = ModelKind::Mlp}, kMnist, 1);
  StateCopy copy;
  copy.capture(*a.model, a.opt.get());
  EXPECT_THROW(copy.restore(*mlp, nullptr), Error);
}

Snapshot snapshot_of(Snapshots& s, int64_t step) {
  return {.state = {.step = step}, .meta = {.step = step}, .copy = s.recycle(step)};
}

TEST(Snapshots, KeepTheNewestTwoAndASecondOfTheSameStepReplacesTheFirst) {
  Snapshots s;
  EXPECT_TRUE(s.empty());
  for (int64_t step : {0, 20, 40}) s.take(snapshot_of(s, step));
  EXPECT_EQ(s.find(0), nullptr);
  ASSERT_NE(s.find(20), nullptr);
  ASSERT_NE(s.find(40), nullptr);
  EXPECT_EQ(s.newest().state.step, 40);
  Snapshot again = snapshot_of(s, 40);
  again.sync_state = "second";
  s.take(std::move(again));
  EXPECT_EQ(s.newest().sync_state, "second");
  ASSERT_NE(s.find(20), nullptr);  // still kept
  s.keep_only(20);
  EXPECT_EQ(s.find(40), nullptr);
  ASSERT_NE(s.find(20), nullptr);
  EXPECT_EQ(s.newest().state.step, 20);
  s.reset(snapshot_of(s, 7));
  EXPECT_EQ(s.find(20), nullptr);
  EXPECT_EQ(s.newest().state.step, 7);
}

TEST(Snapshots, RecycleHandsOverTheCopyOfTheSnapshotThatTakeDisplaces) {
  Snapshots s;
  s.take(snapshot_of(s, 0));
  s.take(snapshot_of(s, 20));
  const StateCopy* oldest = s.find(0)->copy.get();
  // Step 40 displaces step 0: its copy is handed over, and step 0 is no longer found.
  Snapshot next = snapshot_of(s, 40);
  EXPECT_EQ(next.copy.get(), oldest);
  EXPECT_EQ(s.find(0), nullptr);
  s.take(std::move(next));
  // A second snapshot of step 40 replaces the first and reuses its copy; step 20 keeps its own.
  const StateCopy* forty = s.find(40)->copy.get();
  Snapshot again = snapshot_of(s, 40);
  EXPECT_EQ(again.copy.get(), forty);
  s.take(std::move(again));
  ASSERT_NE(s.find(20), nullptr);
  EXPECT_NE(s.find(20)->copy, nullptr);
}

}  // namespace
}  // namespace cohort::train
