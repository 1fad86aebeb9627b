#include "worker/parameter_averager.h"

#include <torch/types.h>

#include "worker/flat_model.h"

namespace localsgd {

struct ParameterAverager::Launched {
  at::Tensor snapshot;
  at::Tensor result;
  int64_t step = 0;
  absl::Status status;
};

absl::Status ParameterAverager::Launch(const std::vector<at::Tensor>& tensors, int fragment,
                                       int64_t* step) {
  at::NoGradGuard no_grad;
  auto round = std::make_shared<Launched>();
  const ValueRange all = WholeModel(tensors);
  round->snapshot = Flatten(tensors, all);
  std::vector<at::Tensor> copy;
  for (const at::Tensor& t : tensors) copy.push_back(t.detach().clone());
  round->step = *step;
  int64_t at = *step;
  round->status = Average(copy, fragment, &at);
  round->result = Flatten(copy, all);
  launched_ = std::move(round);
  return absl::OkStatus();
}

absl::Status ParameterAverager::Merge(const std::vector<at::Tensor>& tensors, int64_t* step) {
  if (launched_ == nullptr) return absl::OkStatus();
  const std::shared_ptr<Launched> round = std::move(launched_);
  if (round->status.ok()) MergeRound(round->result, round->snapshot, tensors, WholeModel(tensors));
  return round->status;
}

}  // namespace localsgd
