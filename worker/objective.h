#ifndef LOCALSGD_WORKER_OBJECTIVE_H_
#define LOCALSGD_WORKER_OBJECTIVE_H_

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "proto/localsgd/v1/run_spec.pb.h"
#include "worker/dataset.h"
#include "worker/model.h"

namespace localsgd {

// What the run's spec says to minimise and how: its loss, its optimizer, its learning-rate
// schedule, and the evaluation on held-out data.

// The spec's loss of `output` (logits) against class `targets`.
torch::Tensor Loss(const torch::Tensor& output, const torch::Tensor& targets, v1::LossKind kind);

// The spec's optimizer (SGD or AdamW) over `params`.
std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(const v1::OptimizerSpec& spec,
                                                       std::vector<torch::Tensor> params);

// The learning rate at optimizer step `step` (0-based) of `total` under the spec's schedule.
double LearningRate(const v1::RunSpec& spec, int64_t step, int64_t total);

// Accuracy and mean loss of `model` on `data`.
struct Evaluation {
  double accuracy = 0;
  double loss = 0;
};
Evaluation Evaluate(Model& model, const Dataset& data, const torch::Device& device,
                    v1::LossKind loss);

}  // namespace localsgd

#endif  // LOCALSGD_WORKER_OBJECTIVE_H_
