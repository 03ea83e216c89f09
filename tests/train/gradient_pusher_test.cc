// GradientPusher against real parameter servers (ps_cluster.h: a store and servers on loopback in
// this process): the shards whose gradients backward has produced are pushed while it still runs.
#include "cohort/train/gradient_pusher.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>

#include "../ps/ps_cluster.h"

namespace cohort::train {
namespace {

using ps::testing::PsCluster;

// Keys in registration order: `unused` (4 values, never given a gradient), the convolution's
// weight and bias (18 + 2), the linear layer's (256 + 8). Two servers split the 288 values at 144:
// shard 1 holds the linear layer's last values, whose gradients backward computes first; shard 0
// holds `unused`, so it is pushed only after backward, with zeros for it.
struct Net : torch::nn::Module {
  Net() {
    unused = register_parameter("unused", torch::ones({4}));
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 2, 3)));
    fc = register_module("fc", torch::nn::Linear(2 * 4 * 4, 8));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc(conv(x).flatten(1)); }
  torch::Tensor unused;
  torch::nn::Conv2d conv{nullptr};
  torch::nn::Linear fc{nullptr};
};

std::vector<float> flat(const std::vector<torch::Tensor>& ts, bool grads) {
  std::vector<float> out;
  for (const auto& t : ts) {
    auto v = grads ? (t.grad().defined() ? t.grad() : torch::zeros_like(t)) : t.detach();
    v = v.contiguous().reshape(-1);
    out.insert(out.end(), v.data_ptr<float>(), v.data_ptr<float>() + v.numel());
  }
  return out;
}

TEST(GradientPusher, ShardsWhoseGradientsAreInArePushedWhileBackwardRuns) {
  torch::manual_seed(1);
  PsCluster cluster({.servers = 2,
                     .shard = {.slots = 1, .consistency = ps::Consistency::Async},
                     .heartbeat = Millis(50),
                     .failure_timeout = Millis(1000)});
  auto net = std::make_shared<Net>();
  const auto params = net->parameters();
  std::vector<uint64_t> sizes;
  for (const auto& p : params) sizes.push_back(static_cast<uint64_t>(p.numel()));
  const ps::Layout layout(sizes, 2);
  ASSERT_EQ(layout.total(), 288u);
  ps::Client client(cluster.client_options(0), layout);
  const std::vector<float> initial = flat(params, false);
  client.init(initial)->wait();
  ps::Client observer(cluster.client_options(0), layout);

  std::vector<float> grads(layout.total());
  GradientPusher pusher(params, client, grads);
  // When backward reaches the convolution, shard 1's part (the linear layer's) must be on its
  // server already: the convolution's gradient hook waits for it there, within a deadline.
  bool seen_early = false;
  net->conv->weight.register_hook([&](const torch::Tensor&) {
    const Deadline d = Deadline::after(Millis(5000));
    while (!d.expired() && !seen_early) seen_early = observer.status()[1].slot_clocks[0] == 1;
  });

  const float scale = 0.5f;
  const double lr = 0.1;
  pusher.start({.clock = 0, .lr = lr, .counts = {.samples = 3}}, scale);
  for (auto& p : params) p.mutable_grad() = torch::Tensor();
  net->forward(torch::randn({3, 1, 6, 6})).pow(2).sum().backward();
  ps::PullInfo info;
  const std::vector<bool> left = pusher.finish(&info);
  EXPECT_TRUE(seen_early) << "shard 1 was not pushed before backward reached the convolution";
  EXPECT_EQ(left, (std::vector<bool>{true, false}));
  EXPECT_EQ(pusher.early_parts(), 1);
  EXPECT_EQ(pusher.parts(), 2);

  // The gradients as pushed: scaled, zeros where backward gave none.
  const std::vector<float> g = flat(params, true);
  for (size_t i = 0; i < g.size(); ++i) ASSERT_FLOAT_EQ(grads[i], g[i] * scale) << i;
  for (size_t i = 0; i < 4; ++i) ASSERT_EQ(grads[i], 0.0f);

  // The rest goes with the pull, and the servers applied the whole step once.
  std::vector<float> now(layout.total());
  client
      .push_pull(client.all_keys(), grads, now,
                 {.clock = 0, .lr = lr, .counts = {.samples = 3}, .push_to = left})
      ->wait();
  for (size_t i = 0; i < now.size(); ++i) {
    ASSERT_NEAR(now[i], initial[i] - static_cast<float>(lr) * grads[i], 1e-6) << i;
  }
  const auto status = client.status();
  EXPECT_EQ(status[0].slot_clocks[0], 1);
  EXPECT_EQ(status[1].slot_clocks[0], 1);
  ASSERT_EQ(status[0].counts.size(), 1u);
  EXPECT_EQ(status[0].counts[0].samples, 3.0);

  // A backward outside a step pushes nothing.
  net->forward(torch::randn({3, 1, 6, 6})).sum().backward();
  EXPECT_EQ(client.status()[1].slot_clocks[0], 1);
}

}  // namespace
}  // namespace cohort::train
