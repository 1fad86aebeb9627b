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

absl::StatusOr<int64_t> HierarchicalAverager::Start(const std::vector<at::Tensor>& tensors) {
  absl::Status status = WithFlat(tensors, /*average_first=*/false,
                                 [&](absl::Span<float> flat) { return leader_->Start(flat); });
  // Every rank learns whether its leader got the initial model, so that none trains on, and
  // the global step to resume at (in two parts of 2^20, each exact in fp32).
  torch::NoGradGuard no_grad;
  constexpr int64_t kPart = int64_t{1} << 20;
  const int64_t step = leader_ != nullptr && status.ok() ? leader_->global_step() : 0;
  at::Tensor info = torch::tensor({status.ok() ? 1.0f : 0.0f, static_cast<float>(step / kPart),
                                   static_cast<float>(step % kPart)},
                                  torch::TensorOptions().device(tensors.front().device()))
                        .contiguous();
  if (absl::Status s = intra_->Broadcast(info); !s.ok()) return s;
  if (!status.ok()) return status;
  at::Tensor host = info.to(torch::kCPU);
  if (host[0].item<float>() != 1.0f) {
    return absl::UnavailableError("the node leader could not get the initial model");
  }
  return static_cast<int64_t>(host[1].item<float>()) * kPart +
         static_cast<int64_t>(host[2].item<float>());
}

}  // namespace localsgd
