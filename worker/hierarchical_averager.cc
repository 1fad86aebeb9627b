#include "worker/hierarchical_averager.h"

#include <torch/torch.h>

namespace localsgd {

HierarchicalAverager::HierarchicalAverager(IntraNodeAverager* intra, NodeLeader* leader)
    : intra_(intra), leader_(leader) {}

template <typename LeaderStep>
absl::Status HierarchicalAverager::WithFlat(const std::vector<at::Tensor>& tensors,
                                            bool average_first, LeaderStep leader_step) {
  torch::NoGradGuard no_grad;
  // One flat fp32 vector on the model's device (NCCL averages it on the GPU); the node leader
  // talks to the coordinator from a CPU copy.
  std::vector<at::Tensor> pieces;
  pieces.reserve(tensors.size());
  for (const at::Tensor& t : tensors) pieces.push_back(t.detach().to(torch::kFloat32).reshape({-1}));
  at::Tensor flat = torch::cat(pieces).contiguous();
  if (average_first) {
    if (absl::Status s = intra_->AllReduceMean(flat); !s.ok()) return s;
  }
  absl::Status status;
  if (leader_ != nullptr) {
    at::Tensor host = flat.is_cpu() ? flat : flat.to(torch::kCPU);
    status = leader_step(absl::MakeSpan(host.data_ptr<float>(), static_cast<size_t>(host.numel())));
    if (!flat.is_cpu()) flat.copy_(host);
  }
  if (absl::Status s = intra_->Broadcast(flat); !s.ok()) return s;
  int64_t offset = 0;
  for (const at::Tensor& t : tensors) {
    const int64_t n = t.numel();
    t.copy_(flat.slice(0, offset, offset + n).view(t.sizes()));
    offset += n;
  }
  return status;
}

absl::Status HierarchicalAverager::Average(const std::vector<at::Tensor>& tensors, int64_t step) {
  return WithFlat(tensors, /*average_first=*/true,
                  [&](absl::Span<float> flat) { return leader_->Sync(flat, step); });
}

absl::Status HierarchicalAverager::Start(const std::vector<at::Tensor>& tensors) {
  absl::Status status = WithFlat(tensors, /*average_first=*/false,
                                 [&](absl::Span<float> flat) { return leader_->Start(flat); });
  // Every rank learns whether its leader got the initial model, so that none trains on.
  torch::NoGradGuard no_grad;
  at::Tensor ok = torch::full({1}, status.ok() ? 1.0f : 0.0f,
                              torch::TensorOptions().device(tensors.front().device()));
  if (absl::Status s = intra_->Broadcast(ok); !s.ok()) return s;
  if (!status.ok()) return status;
  if (ok.item<float>() != 1.0f) {
    return absl::UnavailableError("the node leader could not get the initial model");
  }
  return absl::OkStatus();
}

}  // namespace localsgd
