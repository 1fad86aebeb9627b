#include "worker/objective.h"

#include <torch/torch.h>

#include <cmath>
#include <memory>
#include <vector>

namespace localsgd {

torch::Tensor Loss(const torch::Tensor& output, const torch::Tensor& targets, v1::LossKind kind) {
  if (kind == v1::LOSS_KIND_MSE) {
    torch::Tensor one_hot = torch::one_hot(targets, output.size(1)).to(output.dtype());
    return torch::mse_loss(output, one_hot);
  }
  return torch::nn::functional::cross_entropy(output, targets);
}

std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(const v1::OptimizerSpec& spec,
                                                       std::vector<torch::Tensor> params) {
  if (spec.kind() == v1::OPTIMIZER_KIND_ADAMW) {
    return std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(spec.lr())
                                                             .betas({spec.beta1(), spec.beta2()})
                                                             .eps(spec.eps())
                                                             .weight_decay(spec.weight_decay()));
  }
  return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(spec.lr())
                                                         .momentum(spec.momentum())
                                                         .nesterov(spec.nesterov())
                                                         .weight_decay(spec.weight_decay()));
}

double LearningRate(const v1::RunSpec& spec, int64_t step, int64_t total) {
  const double peak = spec.optimizer().lr();
  const v1::LrScheduleSpec& schedule = spec.lr_schedule();
  const int64_t warmup = schedule.warmup_steps();
  if (step < warmup) return peak * static_cast<double>(step + 1) / static_cast<double>(warmup);
  const double span = std::max<int64_t>(1, total - warmup);
  const double progress = std::min(1.0, static_cast<double>(step - warmup) / span);
  const double floor = schedule.min_lr();
  switch (schedule.kind()) {
    case v1::LR_SCHEDULE_KIND_COSINE:
      return floor + (peak - floor) * 0.5 * (1 + std::cos(M_PI * progress));
    case v1::LR_SCHEDULE_KIND_LINEAR:
      return floor + (peak - floor) * (1 - progress);
    default:
      return peak;
  }
}

Evaluation Evaluate(Model& model, const Dataset& data, const torch::Device& device,
                    v1::LossKind loss) {
  torch::NoGradGuard no_grad;
  model.Train(false);
  int64_t correct = 0;
  double loss_sum = 0;
  const int64_t batch = 1024;
  for (int64_t begin = 0; begin < data.size(); begin += batch) {
    const int64_t end = std::min(data.size(), begin + batch);
    torch::Tensor x = data.inputs.slice(0, begin, end).to(device);
    torch::Tensor y = data.targets.slice(0, begin, end).to(device);
    torch::Tensor out = model.Forward(x);
    correct += out.argmax(1).eq(y).sum().item<int64_t>();
    loss_sum += Loss(out, y, loss).item<double>() * static_cast<double>(end - begin);
  }
  model.Train(true);
  Evaluation e;
  if (data.size() > 0) {
    e.accuracy = static_cast<double>(correct) / static_cast<double>(data.size());
    e.loss = loss_sum / static_cast<double>(data.size());
  }
  return e;
}

}  // namespace localsgd
