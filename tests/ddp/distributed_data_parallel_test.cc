// DistributedDataParallel over real communicators: ranks are threads connected over loopback TCP.
#include "cohort/ddp/distributed_data_parallel.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <mutex>
#include <thread>

#include "cohort/store/memory_store.h"

namespace cohort::ddp {
namespace {

struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(20, 64));
    fc2 = register_module("fc2", torch::nn::Linear(64, 32));
    fc3 = register_module("fc3", torch::nn::Linear(32, 5));
  }
  torch::Tensor forward(torch::Tensor x) { return fc3(torch::relu(fc2(torch::relu(fc1(x))))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};

// Runs fn(rank, communicator) on `world` threads, each with its own communicator.
void run_ranks(int world, const std::function<void(int, comm::Communicator&)>& fn) {
  store::MemoryStore store;
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(world);
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        torch::set_num_threads(1);
        auto c = comm::Communicator::create(
            store,
            {.rank = r, .size = world, .token = "ddp-test", .timeout = std::chrono::seconds(20)});
        fn(r, *c);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// Ranks are threads and libtorch's default generator is global: seeding it and drawing from it
// happen under one lock, so that what a rank draws does not depend on the other threads.
std::mutex& generator_mutex() {
  static std::mutex m;
  return m;
}

// A Net whose initial weights come from `seed` alone, whatever the other rank threads draw.
std::shared_ptr<Net> seeded_net(uint64_t seed) {
  std::lock_guard lock(generator_mutex());
  torch::manual_seed(seed);
  return std::make_shared<Net>();
}

torch::Tensor batch_for(int rank, int step) {
  std::lock_guard lock(generator_mutex());
  torch::manual_seed(1000 + 17 * rank + step);
  return torch::randn({8, 20});
}
torch::Tensor labels_for(int rank, int step) {
  std::lock_guard lock(generator_mutex());
  torch::manual_seed(5000 + 31 * rank + step);
  return torch::randint(0, 5, {8});
}

TEST(DistributedDataParallel, GradientsAreTheAverageOfEveryRanksGradients) {
  const int world = 3;
  // Reference: each rank's local gradient computed on one model, averaged by hand.
  auto ref = seeded_net(7);
  std::vector<torch::Tensor> expected;
  for (int r = 0; r < world; ++r) {
    ref->zero_grad();
    torch::nn::functional::cross_entropy(ref->forward(batch_for(r, 0)), labels_for(r, 0))
        .backward();
    int i = 0;
    for (auto& p : ref->parameters()) {
      if (r == 0)
        expected.push_back(p.grad().clone());
      else
        expected[i] += p.grad();
      ++i;
    }
  }
  for (auto& e : expected) e /= world;

  std::vector<std::vector<torch::Tensor>> got(world);
  run_ranks(world, [&](int rank, comm::Communicator& c) {
    auto model = seeded_net(7);  // same init as the reference
    // Tiny buckets: several allreduces per backward, overlapping with it.
    DistributedDataParallel ddp(model, c, {.bucket_bytes = 2048, .first_bucket_bytes = 512});
    EXPECT_GT(ddp.bucket_count(), 2u);
    model->zero_grad();
    ddp.backward(torch::nn::functional::cross_entropy(model->forward(batch_for(rank, 0)),
                                                      labels_for(rank, 0)));
    for (auto& p : model->parameters()) got[rank].push_back(p.grad().clone());
  });
  for (int r = 0; r < world; ++r) {
    ASSERT_EQ(got[r].size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_TRUE(torch::allclose(got[r][i], expected[i], 1e-5, 1e-6))
          << "rank " << r << " param " << i;
      // Every rank holds the very same bits.
      EXPECT_TRUE(torch::equal(got[r][i], got[0][i])) << "rank " << r << " param " << i;
    }
  }
}

TEST(DistributedDataParallel, ReplicasStayBitwiseIdenticalOverManySteps) {
  const int world = 2;
  std::vector<std::string> digests(world);
  std::vector<std::string> initial(world);
  run_ranks(world, [&](int rank, comm::Communicator& c) {
    auto model = seeded_net(100 + rank);  // different inits: the broadcast must make them equal
    DistributedDataParallel ddp(model, c, {.bucket_bytes = 8192, .first_bucket_bytes = 2048});
    initial[rank] = ddp.parameter_digest();
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    for (int step = 0; step < 25; ++step) {
      opt.zero_grad();
      ddp.backward(torch::nn::functional::cross_entropy(model->forward(batch_for(rank, step)),
                                                        labels_for(rank, step)));
      opt.step();
    }
    digests[rank] = ddp.parameter_digest();
    EXPECT_EQ(ddp.stats().steps, 25u);
  });
  EXPECT_EQ(initial[0], initial[1]);
  EXPECT_EQ(digests[0], digests[1]);
  EXPECT_NE(digests[0], initial[0]);  // training moved the parameters
}

TEST(DistributedDataParallel, CompressesBucketsAboveTheThresholdAndCountsTheBytes) {
  const int world = 2;
  std::vector<std::vector<torch::Tensor>> got(world), exact(world);
  std::vector<DdpStats> stats(world);
  for (bool compress : {false, true}) {
    run_ranks(world, [&](int rank, comm::Communicator& c) {
      auto model = seeded_net(7);
      // Two buckets (see BucketsFollowBackwardOrderAndCapacity): 8980 bytes (fc3, fc2) and 5376
      // (fc1). With an 8 KiB threshold only the first is compressed.
      compress::CompressionOptions o;
      o.method = compress ? compress::Method::Int8 : compress::Method::None;
      o.min_bytes = 8192;
      DistributedDataParallel ddp(
          model, c, {.bucket_bytes = 8 * 1024, .first_bucket_bytes = 8 * 1024, .compression = o});
      model->zero_grad();
      ddp.backward(torch::nn::functional::cross_entropy(model->forward(batch_for(rank, 0)),
                                                        labels_for(rank, 0)));
      auto& out = compress ? got[rank] : exact[rank];
      for (auto& p : model->parameters()) out.push_back(p.grad().clone());
      stats[rank] = ddp.stats();
    });
  }
  // Parameters: 0 fc1.w, 1 fc1.b (uncompressed bucket: exact), 2.. in the int8 bucket.
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(torch::equal(got[r][0], exact[r][0])) << "rank " << r;
    EXPECT_TRUE(torch::equal(got[r][1], exact[r][1])) << "rank " << r;
    double err = 0, norm = 0;
    int64_t values = 0;
    for (size_t i = 0; i < got[r].size(); ++i) {
      values += got[r][i].numel();
      if (i <= 1) continue;
      err += (got[r][i] - exact[r][i]).pow(2).sum().item<double>();
      norm += exact[r][i].pow(2).sum().item<double>();
      EXPECT_TRUE(torch::equal(got[r][i], got[0][i])) << "rank " << r << " param " << i;
    }
    // int8 rounds each value by less than 1/127 of its chunk's largest, twice: a few percent.
    EXPECT_LT(std::sqrt(err / norm), 0.05) << "rank " << r;
    EXPECT_GT(std::sqrt(err / norm), 0.0) << "rank " << r << ": nothing was compressed";
    EXPECT_GT(stats[r].bytes_sent, 0u);
    EXPECT_GT(stats[r].bytes_received, 0u);
    // 2(n-1)/n of both buckets' f32 bytes.
    EXPECT_EQ(stats[r].uncompressed_bytes, static_cast<uint64_t>(values) * 4);
    // The int8 bucket sends about a quarter of its bytes, the other all of them.
    EXPECT_GT(stats[r].compression_ratio(), 1.5);
    EXPECT_LT(stats[r].compression_ratio(), 3.0);
  }
}

// Top-k warms up for 10 steps. A fresh job's first backward is a plain allreduce; a job resumed at
// step 10 (set_step) compresses from its first backward on.
TEST(DistributedDataParallel, AJobResumedPastTheWarmUpCompressesAtOnce) {
  const int world = 2;
  std::vector<double> ratio_fresh(world), ratio_resumed(world);
  run_ranks(world, [&](int rank, comm::Communicator& c) {
    for (int64_t step : {int64_t{0}, int64_t{10}}) {
      auto model = seeded_net(7);
      compress::CompressionOptions o;
      o.method = compress::Method::TopK;
      o.topk_ratio = 0.01;
      o.topk_warmup_steps = 10;
      o.min_bytes = 0;
      DistributedDataParallel ddp(model, c, {.compression = o});
      ddp.set_step(step);
      model->zero_grad();
      ddp.backward(torch::nn::functional::cross_entropy(model->forward(batch_for(rank, 0)),
                                                        labels_for(rank, 0)));
      (step == 0 ? ratio_fresh : ratio_resumed)[rank] = ddp.stats().compression_ratio();
    }
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_LT(ratio_fresh[r], 1.1) << "rank " << r << ": the fresh job did not warm up";
    EXPECT_GT(ratio_resumed[r], 5.0) << "rank " << r << ": the resumed job warmed up again";
  }
}

TEST(DistributedDataParallel, BucketsFollowBackwardOrderAndCapacity) {
  run_ranks(1, [&](int, comm::Communicator& c) {
    auto model = std::make_shared<Net>();
    // Parameters: 0 fc1.w 1 fc1.b 2 fc2.w 3 fc2.b 4 fc3.w 5 fc3.b — reverse order into buckets.
    // fc3 (165 floats) and fc2's bias (32) take 788 bytes; fc2's weight (2048 floats) takes the
    // bucket past 8 KiB and closes it - it joins the small tensors before it rather than waiting
    // in the next bucket. fc1 (1344 floats) is the rest.
    DistributedDataParallel ddp(model, c,
                                {.bucket_bytes = 8 * 1024, .first_bucket_bytes = 8 * 1024});
    auto layout = ddp.bucket_layout();
    ASSERT_EQ(layout.size(), 2u);
    EXPECT_EQ(layout[0], (std::vector<size_t>{5, 4, 3, 2}));
    EXPECT_EQ(layout[1], (std::vector<size_t>{1, 0}));
  });
}

struct NormNet : torch::nn::Module {
  NormNet() {
    fc = register_module("fc", torch::nn::Linear(20, 16));
    bn = register_module("bn", torch::nn::BatchNorm1d(16));
    out = register_module("out", torch::nn::Linear(16, 5));
  }
  torch::Tensor forward(torch::Tensor x) { return out(torch::relu(bn(fc(x)))); }
  torch::nn::Linear fc{nullptr}, out{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
};

std::shared_ptr<NormNet> seeded_norm_net(uint64_t seed) {
  std::lock_guard lock(generator_mutex());
  torch::manual_seed(seed);
  return std::make_shared<NormNet>();
}

// Each rank's forward updates the running statistics from its own batch. After every backward
// they are rank 0's (broadcast) or the ranks' average (average) on every rank; with none they
// stay each rank's own, and the parameter check names the buffer that drifted.
TEST(DistributedDataParallel, BuffersAreSynchronisedAtEveryStep) {
  const int world = 3;
  for (BufferSync mode : {BufferSync::Broadcast, BufferSync::Average, BufferSync::None}) {
    SCOPED_TRACE(std::string(buffer_sync_name(mode)));
    // Per step and rank: the running mean after this rank's forward, and after the step.
    std::vector<std::vector<torch::Tensor>> local(world), synced(world);
    std::vector<std::string> check_error(world);
    run_ranks(world, [&](int rank, comm::Communicator& c) {
      auto model = seeded_norm_net(7);
      DistributedDataParallel ddp(model, c, {.buffers = mode});
      torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.05));
      for (int step = 0; step < 3; ++step) {
        opt.zero_grad();
        auto loss = torch::nn::functional::cross_entropy(model->forward(batch_for(rank, step)),
                                                         labels_for(rank, step));
        local[rank].push_back(model->bn->running_mean.clone());
        ddp.backward(loss);
        opt.step();
        synced[rank].push_back(model->bn->running_mean.clone());
      }
      EXPECT_EQ(model->bn->num_batches_tracked.item<int64_t>(), 3);
      try {
        ddp.check_parameters("the end");
      } catch (const ReplicaDivergenceError& e) {
        check_error[rank] = e.what();
      }
    });
    for (int step = 0; step < 3; ++step) {
      torch::Tensor average = (local[0][step] + local[1][step] + local[2][step]) / world;
      EXPECT_FALSE(torch::equal(local[0][step], local[1][step])) << "different batches";
      for (int r = 0; r < world; ++r) {
        if (mode == BufferSync::Broadcast) {
          EXPECT_TRUE(torch::equal(synced[r][step], local[0][step])) << "rank " << r;
        } else if (mode == BufferSync::Average) {
          EXPECT_TRUE(torch::allclose(synced[r][step], average, 1e-6, 1e-7)) << "rank " << r;
          EXPECT_TRUE(torch::equal(synced[r][step], synced[0][step])) << "rank " << r;
        } else {
          EXPECT_TRUE(torch::equal(synced[r][step], local[r][step])) << "rank " << r;
        }
      }
    }
    // The check compares buffers that are kept equal, and only those.
    for (int r = 0; r < world; ++r) EXPECT_EQ(check_error[r], "") << "rank " << r;
  }
}

// A replica whose buffers drifted (here: changed by hand on one rank) is named by the check.
TEST(DistributedDataParallel, TheParameterCheckNamesABufferThatDiffers) {
  const int world = 2;
  std::vector<std::string> errors(world);
  run_ranks(world, [&](int rank, comm::Communicator& c) {
    auto model = seeded_norm_net(7);
    DistributedDataParallel ddp(model, c);
    if (rank == 1) {
      torch::NoGradGuard no_grad;
      model->bn->running_var.add_(1.0);
    }
    try {
      ddp.check_parameters("step 3");
    } catch (const ReplicaDivergenceError& e) {
      errors[rank] = e.what();
    }
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_NE(errors[r].find("parameters diverged at step 3: rank 1's 'bn.running_var (buffer)'"),
              std::string::npos)
        << errors[r];
  }
}

TEST(DistributedDataParallel, UnusedParameterStillSynchronises) {
  const int world = 2;
  run_ranks(world, [&](int rank, comm::Communicator& c) {
    auto model = seeded_net(3);
    DistributedDataParallel ddp(model, c, {.bucket_bytes = 4096, .first_bucket_bytes = 1024});
    model->zero_grad();
    // Only fc1 takes part: the other buckets are exchanged as zeros and nothing hangs.
    auto out = model->fc1->forward(batch_for(rank, 0)).sum();
    ddp.backward(out);
    EXPECT_TRUE(model->fc3->weight.grad().defined());
    EXPECT_EQ(model->fc3->weight.grad().abs().sum().item<float>(), 0.0f);
    EXPECT_GT(model->fc1->weight.grad().abs().sum().item<float>(), 0.0f);
  });
}

// Local SGD's averaging: models that went apart (each rank's own seed) become their mean, and a
// backward outside DDP's control leaves the gradients local.
TEST(DistributedDataParallel, AveragingMakesEveryParameterTheMeanOverRanks) {
  const int world = 3;
  std::vector<std::vector<torch::Tensor>> before(world), after(world);
  std::vector<uint64_t> sent(world);
  run_ranks(world, [&](int rank, comm::Communicator& c) {
    auto model = seeded_net(100 + rank);
    DistributedDataParallel ddp(model, c, {.broadcast_on_construct = false});
    model->zero_grad();
    torch::nn::functional::cross_entropy(model->forward(batch_for(rank, 0)), labels_for(rank, 0))
        .backward();
    EXPECT_EQ(ddp.stats().bytes_sent, 0u) << "a plain backward exchanged gradients";
    for (const auto& p : model->parameters()) before[rank].push_back(p.detach().clone());
    ddp.average_parameters();
    for (const auto& p : model->parameters()) after[rank].push_back(p.detach().clone());
    sent[rank] = ddp.stats().bytes_sent;
  });
  for (size_t i = 0; i < before[0].size(); ++i) {
    const auto mean = (before[0][i] + before[1][i] + before[2][i]) / 3;
    for (int r = 0; r < world; ++r) {
      EXPECT_TRUE(torch::allclose(after[r][i], mean, 1e-5, 1e-6)) << "parameter " << i;
      EXPECT_TRUE(torch::equal(after[r][i], after[0][i])) << "rank " << r << " parameter " << i;
    }
  }
  for (int r = 0; r < world; ++r) EXPECT_GT(sent[r], 0u);
}

TEST(DistributedDataParallel, OptimizerStateIsBroadcastFromRoot) {
  const int world = 2;
  std::vector<std::string> digests(world);
  run_ranks(world, [&](int rank, comm::Communicator& c) {
    auto model = seeded_net(11);
    DistributedDataParallel ddp(model, c);
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    if (rank == 0) {  // only rank 0 builds momentum, locally
      opt.zero_grad();
      model->forward(batch_for(0, 0)).sum().backward();
      opt.step();
    }
    ddp.broadcast_parameters(0);
    ddp.broadcast_optimizer_state(opt, 0);
    // One identical synchronised step: equal only if rank 1 received rank 0's momentum buffers.
    opt.zero_grad();
    ddp.backward(model->forward(batch_for(rank, 1)).sum());
    opt.step();
    digests[rank] = ddp.parameter_digest();
  });
  EXPECT_EQ(digests[0], digests[1]);
}

// Like run_ranks, with the collective fingerprint check on; collects each rank's error.
std::vector<std::string> errors_on_ranks(int world, bool check_collectives,
                                         const std::function<void(int, comm::Communicator&)>& fn) {
  store::MemoryStore store;
  std::vector<std::thread> threads;
  std::vector<std::string> errors(world);
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        torch::set_num_threads(1);
        auto c = comm::Communicator::create(store, {.rank = r,
                                                    .size = world,
                                                    .token = "ddp-test",
                                                    .timeout = std::chrono::seconds(20),
                                                    .check_collectives = check_collectives});
        fn(r, *c);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

TEST(ConsistencyChecks, ARankThatSkipsAParameterIsCaughtBeforeDataMoves) {
  auto errors = errors_on_ranks(2, /*check_collectives=*/true, [](int r, comm::Communicator& c) {
    auto net = std::make_shared<Net>();
    // Rank 1 leaves fc2.bias out of DDP: its gradient bucket is 32 elements shorter.
    if (r == 1) net->fc2->bias.set_requires_grad(false);
    DistributedDataParallel ddp(net, c);
    auto loss =
        torch::nn::functional::cross_entropy(net->forward(batch_for(r, 0)), labels_for(r, 0));
    ddp.backward(loss);
  });
  const int total = 20 * 64 + 64 + 64 * 32 + 32 + 32 * 5 + 5;
  for (int r = 0; r < 2; ++r) {
    const std::string& e = errors[r];
    EXPECT_NE(e.find("collective mismatch"), std::string::npos) << "rank " << r << ": " << e;
    EXPECT_NE(e.find("of " + std::to_string(total) + " f32"), std::string::npos) << e;
    EXPECT_NE(e.find("of " + std::to_string(total - 32) + " f32"), std::string::npos) << e;
    EXPECT_NE(e.find(r == 0 ? "but rank 1 called" : "rank 1 called"), std::string::npos) << e;
  }
}

TEST(ConsistencyChecks, AFlippedBitInOneReplicaIsNamedWithItsTensor) {
  auto errors = errors_on_ranks(3, /*check_collectives=*/false, [](int r, comm::Communicator& c) {
    auto net = std::make_shared<Net>();
    DistributedDataParallel ddp(net, c);
    ddp.check_parameters("step 0");  // identical after the initial broadcast: passes
    if (r == 2) {
      torch::NoGradGuard no_grad;
      auto w = net->fc2->weight.data();
      auto* p = reinterpret_cast<uint32_t*>(w.data_ptr<float>());
      p[17] ^= 1u << 3;  // one low mantissa bit of one element
    }
    ddp.check_parameters("step 20");
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(errors[r].find("parameters diverged at step 20: rank 2's 'fc2.weight' (tensor 2 of 6)"
                             " differs from rank 0's"),
              std::string::npos)
        << "rank " << r << ": " << errors[r];
    EXPECT_NE(errors[r].find("2 of 3 ranks agree"), std::string::npos) << errors[r];
  }
}

}  // namespace
}  // namespace cohort::ddp
