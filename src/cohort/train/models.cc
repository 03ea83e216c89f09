#include "cohort/train/models.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cmath>

#include "cohort/base/error.h"

namespace cohort::train {
namespace {

namespace nn = torch::nn;

class SequentialModel : public Model {
 public:
  explicit SequentialModel(nn::Sequential layers) : layers_(register_module("layers", layers)) {}
  torch::Tensor forward(torch::Tensor x) override { return layers_->forward(in_layout(x)); }

 private:
  nn::Sequential layers_;
};

nn::Conv2d conv3x3(int64_t in, int64_t out, int64_t stride) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
}

// Two 3x3 convolutions with a shortcut; a 1x1 projection when the shape changes (He et al. 2016).
class BasicBlockImpl : public nn::Module {
 public:
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride)
      : conv1_(register_module("conv1", conv3x3(in, out, stride))),
        bn1_(register_module("bn1", nn::BatchNorm2d(out))),
        conv2_(register_module("conv2", conv3x3(out, out, 1))),
        bn2_(register_module("bn2", nn::BatchNorm2d(out))) {
    if (stride != 1 || in != out) {
      shortcut_ = register_module(
          "shortcut",
          nn::Sequential(nn::Conv2d(nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)),
                         nn::BatchNorm2d(out)));
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor y = torch::relu(bn1_->forward(conv1_->forward(x)));
    y = bn2_->forward(conv2_->forward(y));
    return torch::relu(y + (shortcut_ ? shortcut_->forward(x) : x));
  }

 private:
  nn::Conv2d conv1_;
  nn::BatchNorm2d bn1_;
  nn::Conv2d conv2_;
  nn::BatchNorm2d bn2_;
  nn::Sequential shortcut_{nullptr};
};
TORCH_MODULE(BasicBlock);

class ResNet : public Model {
 public:
  ResNet(int64_t channels, int64_t classes)
      : stem_(register_module(
            "stem", nn::Sequential(conv3x3(channels, 16, 1), nn::BatchNorm2d(16), nn::ReLU()))),
        stages_(register_module("stages", nn::Sequential())),
        fc_(register_module("fc", nn::Linear(64, classes))) {
    int64_t in = 16;
    for (int64_t width : {16, 32, 64}) {
      for (int block = 0; block < 2; ++block) {
        int64_t stride = (block == 0 && width != 16) ? 2 : 1;
        stages_->push_back(BasicBlock(in, width, stride));
        in = width;
      }
    }
  }
  torch::Tensor forward(torch::Tensor x) override {
    x = stages_->forward(stem_->forward(in_layout(x)));
    x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
    return fc_->forward(x);
  }

 private:
  nn::Sequential stem_;
  nn::Sequential stages_;
  nn::Linear fc_;
};

// The tensor with channels-last strides. Not contiguous(ChannelsLast): that keeps a tensor whose
// layout is ambiguous (one channel, or a 1x1 kernel) in NCHW strides, and a convolution whose
// input and weight both suggest NCHW runs in NCHW - and hands NCHW to every layer after it.
torch::Tensor channels_last(const torch::Tensor& t) {
  return t.to(t.options(), /*non_blocking=*/false, /*copy=*/false,
              torch::MemoryFormat::ChannelsLast);
}

// PyTorch's default initialisation for linear and convolution layers (kaiming_uniform with
// a = sqrt(5), i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases alike), drawn from
// a generator of our own: libtorch's default draws from the process-wide generator, which threads
// building models at the same time would share.
void initialise(nn::Module& model, uint64_t seed) {
  torch::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto fill = [&](torch::Tensor& w, torch::Tensor& b) {
    const double fan_in = static_cast<double>(w.numel() / w.size(0));
    const double bound = 1.0 / std::sqrt(fan_in);
    w.uniform_(-bound, bound, gen);
    if (b.defined()) b.uniform_(-bound, bound, gen);
  };
  for (const auto& m : model.modules(/*include_self=*/false)) {
    if (auto* linear = m->as<nn::Linear>()) fill(linear->weight, linear->bias);
    if (auto* conv = m->as<nn::Conv2d>()) fill(conv->weight, conv->bias);
  }
}

}  // namespace

torch::Tensor Model::in_layout(const torch::Tensor& images) const {
  if (memory_format_ != MemoryFormat::ChannelsLast || images.dim() != 4) return images;
  return channels_last(images);
}

ModelPtr make_model(const ModelConfig& config, const InputSpec& input, uint64_t seed) {
  if (input.shape.size() != 3 || input.classes < 2) {
    throw ConfigError(
        "make_model: the input must be [channels, height, width] with 2 or more "
        "classes");
  }
  const int64_t c = input.shape[0], h = input.shape[1], w = input.shape[2];
  ModelPtr model;
  switch (config.name) {
    case ModelKind::Mlp:
      model = std::make_shared<SequentialModel>(
          nn::Sequential(nn::Flatten(), nn::Linear(c * h * w, 256), nn::ReLU(),
                         nn::Linear(256, 128), nn::ReLU(), nn::Linear(128, input.classes)));
      break;
    case ModelKind::Cnn:
      if (h < 4 || w < 4) throw ConfigError("make_model: cnn needs images of at least 4x4 pixels");
      model = std::make_shared<SequentialModel>(nn::Sequential(
          nn::Conv2d(nn::Conv2dOptions(c, 32, 5).padding(2)), nn::ReLU(), nn::MaxPool2d(2),
          nn::Conv2d(nn::Conv2dOptions(32, 64, 5).padding(2)), nn::ReLU(), nn::MaxPool2d(2),
          nn::Flatten(), nn::Linear(64 * (h / 4) * (w / 4), 128), nn::ReLU(),
          nn::Linear(128, input.classes)));
      break;
    case ModelKind::ResNet:
      model = std::make_shared<ResNet>(c, input.classes);
      break;
  }
  initialise(*model, seed);
  const bool convolutional = config.name != ModelKind::Mlp;
  model->memory_format_ =
      config.memory_format == MemoryFormat::Auto
          ? (convolutional ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous)
          : config.memory_format;
  if (model->memory_format_ == MemoryFormat::ChannelsLast) {
    // In place of the data, so that the parameters stay the same tensors (optimizer, DDP).
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) {
      if (p.dim() == 4) p.set_data(channels_last(p));
    }
    for (auto& b : model->buffers()) {
      if (b.dim() == 4) b.set_data(channels_last(b));
    }
  }
  return model;
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerConfig& config,
                                                        const std::vector<torch::Tensor>& params) {
  if (config.name == OptimizerKind::Adam) {
    return std::make_unique<torch::optim::Adam>(params,
                                                torch::optim::AdamOptions(config.lr)
                                                    .betas({config.betas[0], config.betas[1]})
                                                    .eps(config.eps)
                                                    .weight_decay(config.weight_decay));
  }
  return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(config.lr)
                                                         .momentum(config.momentum)
                                                         .weight_decay(config.weight_decay));
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

double learning_rate(torch::optim::Optimizer& optimizer) {
  return optimizer.param_groups().at(0).options().get_lr();
}

}  // namespace cohort::train
