// Data-parallel training of a model of your own with Cohort, from your own program.
//
// Every process runs this same program; they find each other through the environment
// (COHORT_RANK, COHORT_WORLD_SIZE, COHORT_MASTER_ADDR, COHORT_TOKEN - or the rank and size that
// mpirun / srun set). Each rank trains on its own shard of Fashion-MNIST; DistributedDataParallel
// averages the gradients after every backward pass, so the replicas stay identical.
//
//   custom_model [--data DIR] [--epochs N] [--max-steps N] [--batch-size N] [--lr X]
//                [--seed N] [--threads N]
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "cohort/ddp/distributed_data_parallel.h"
#include "cohort/elastic/environment.h"
#include "cohort/train/dataset.h"
#include "cohort/train/sampler.h"

namespace {

// The model: a small convolutional network, written here rather than taken from Cohort's zoo.
// DistributedDataParallel takes any torch::nn::Module.
struct TinyCnn : torch::nn::Module {
  TinyCnn()
      : conv1(register_module("conv1",
                              torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 8, 3).padding(1)))),
        conv2(register_module("conv2",
                              torch::nn::Conv2d(torch::nn::Conv2dOptions(8, 16, 3).padding(1)))),
        fc1(register_module("fc1", torch::nn::Linear(16 * 7 * 7, 64))),
        fc2(register_module("fc2", torch::nn::Linear(64, 10))) {}

  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1(x)), 2);  // 28x28 -> 14x14
    x = torch::max_pool2d(torch::relu(conv2(x)), 2);  // 14x14 -> 7x7
    x = torch::relu(fc1(x.flatten(1)));
    return fc2(x);
  }

  torch::nn::Conv2d conv1, conv2;
  torch::nn::Linear fc1, fc2;
};

struct Flags {
  std::string data = "/usr/share/datasets/fashion-mnist";
  int64_t epochs = 1;
  int64_t max_steps = 0;    // 0: no limit
  int64_t batch_size = 64;  // per rank
  double lr = 0.05;
  uint64_t seed = 0;
  int threads = 1;
};

Flags parse_flags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string name = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument(name + " needs a value");
    std::string value = argv[++i];
    if (name == "--data")
      f.data = value;
    else if (name == "--epochs")
      f.epochs = std::stoll(value);
    else if (name == "--max-steps")
      f.max_steps = std::stoll(value);
    else if (name == "--batch-size")
      f.batch_size = std::stoll(value);
    else if (name == "--lr")
      f.lr = std::stod(value);
    else if (name == "--seed")
      f.seed = std::stoull(value);
    else if (name == "--threads")
      f.threads = std::stoi(value);
    else
      throw std::invalid_argument("unknown flag " + name);
  }
  return f;
}

// Test accuracy over the whole test set: rank r scores examples r, r+W, ...; the counts are summed.
double evaluate(TinyCnn& model, const cohort::train::Dataset& test,
                cohort::comm::Communicator& comm) {
  torch::NoGradGuard no_grad;
  model.eval();
  double counts[2] = {0, 0};  // correct, scored
  std::vector<int64_t> mine;
  for (int64_t i = comm.rank(); i < test.size(); i += comm.size()) mine.push_back(i);
  auto [x, y] = test.batch(mine);
  counts[0] = model.forward(x).argmax(1).eq(y).sum().item<double>();
  counts[1] = static_cast<double>(mine.size());
  comm.allreduce(cohort::Buffer{cohort::DType::F64, counts, 2})->wait();
  model.train();
  return counts[0] / counts[1];
}

int run(const Flags& flags) {
  torch::set_num_threads(flags.threads);
  cohort::elastic::ProcessGroup group = cohort::elastic::init_from_environment();
  const int rank = group.rank(), world = group.size();

  auto train_set = cohort::train::load_idx_dataset(flags.data, cohort::train::Split::Train);
  auto test_set = cohort::train::load_idx_dataset(flags.data, cohort::train::Split::Test);

  torch::manual_seed(flags.seed);
  auto model = std::make_shared<TinyCnn>();
  // Rank 0's initial parameters are broadcast to every rank here.
  cohort::ddp::DistributedDataParallel ddp(model, *group.comm);
  torch::optim::SGD optimizer(model->parameters(),
                              torch::optim::SGDOptions(flags.lr).momentum(0.9));

  cohort::train::DistributedSampler sampler({.dataset_size = train_set.size(),
                                             .world_size = world,
                                             .rank = rank,
                                             .batch_size = flags.batch_size,
                                             .seed = flags.seed});
  int64_t step = 0;
  double loss_value = 0;
  auto more_steps = [&] { return flags.max_steps <= 0 || step < flags.max_steps; };
  for (int64_t epoch = 0; epoch < flags.epochs && more_steps(); ++epoch) {
    sampler.reset(epoch);
    while (more_steps()) {
      auto batch = sampler.next();
      if (!batch) break;  // end of the epoch
      auto [x, y] = train_set.batch(batch->indices);
      optimizer.zero_grad();
      auto loss_sum = torch::nn::functional::cross_entropy(
          model->forward(x), y,
          torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
      // DDP averages the gradients over the ranks; scaling by world / global batch makes the
      // result the gradient of the mean loss over the global batch (the last batch of an epoch
      // may be smaller, and uneven across ranks).
      ddp.backward(loss_sum *
                   (static_cast<double>(world) / static_cast<double>(batch->global_batch)));
      optimizer.step();
      ++step;
      if (!batch->indices.empty()) {
        loss_value = loss_sum.item<double>() / static_cast<double>(batch->indices.size());
      }
      if (rank == 0 && step % 100 == 0)
        std::printf("step %lld loss %.4f\n", (long long)step, loss_value);
    }
  }

  double accuracy = evaluate(*model, test_set, *group.comm);
  if (rank == 0) {
    std::printf("trained %lld steps on %d ranks; test accuracy: %.4f\n", (long long)step, world,
                accuracy);
  }
  // Equal on every rank: the replicas never diverged.
  std::printf("rank %d parameter digest: %s\n", rank, ddp.parameter_digest().c_str());
  std::fflush(stdout);
  group.finish();  // rank 0 keeps the rendezvous store up until every rank is done with it
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse_flags(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "custom_model: %s\n", e.what());
    return 1;
  }
}
