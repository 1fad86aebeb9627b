#include "worker/hierarchical_averager.h"

#include <torch/torch.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "exchange/sync_stream.h"

namespace localsgd {
namespace {

// One flat fp32 vector on the model's device (NCCL averages it on the GPU).
at::Tensor Flatten(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> pieces;
  pieces.reserve(tensors.size());
  for (const at::Tensor& t : tensors)
    pieces.push_back(t.detach().to(torch::kFloat32).reshape({-1}));
  return torch::cat(pieces).contiguous();
}

void Unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& tensors) {
  int64_t offset = 0;
  for (const at::Tensor& t : tensors) {
    const int64_t n = t.numel();
    t.copy_(flat.slice(0, offset, offset + n).view(t.sizes()));
    offset += n;
  }
}

// Broadcasts rank 0's (code, step) to the group (the step in two parts of 2^20, each exact in
// fp32).
absl::StatusOr<std::pair<int, int64_t>> BroadcastCodeAndStep(IntraNodeAverager& intra, int code,
                                                             int64_t step,
                                                             const at::Device& device) {
  constexpr int64_t kPart = int64_t{1} << 20;
  at::Tensor info = torch::tensor({static_cast<float>(code), static_cast<float>(step / kPart),
                                   static_cast<float>(step % kPart)},
                                  torch::TensorOptions().device(device))
                        .contiguous();
  LOCALSGD_RETURN_IF_ERROR(intra.Broadcast(info));
  at::Tensor host = info.to(torch::kCPU);
  return std::make_pair(static_cast<int>(host[0].item<float>()),
                        static_cast<int64_t>(host[1].item<float>()) * kPart +
                            static_cast<int64_t>(host[2].item<float>()));
}

}  // namespace

HierarchicalAverager::HierarchicalAverager(NodeGroup* group, NodeLeader* leader, TakeLead take_lead)
    : group_(group),
      leader_(leader),
      take_lead_(std::move(take_lead)),
      leader_rank_(group->members().front()) {}

template <typename LeaderStep>
absl::Status HierarchicalAverager::Exchange(at::Tensor& flat, bool average_first,
                                            LeaderStep leader_step, bool* leader_has_result) {
  *leader_has_result = false;
  if (average_first) {
    LOCALSGD_RETURN_IF_ERROR(intra().AllReduceMean(flat));
  }
  if (leader_ != nullptr) {
    // The node leader talks to the coordinator from a CPU copy.
    at::Tensor host = flat.is_cpu() ? flat : flat.to(torch::kCPU);
    leader_step(absl::MakeSpan(host.data_ptr<float>(), static_cast<size_t>(host.numel())));
    if (!flat.is_cpu()) flat.copy_(host);
    *leader_has_result = true;
  }
  return intra().Broadcast(flat);
}

absl::Status HierarchicalAverager::Average(const std::vector<at::Tensor>& tensors, int64_t* step) {
  if (!health_.ok()) return health_;
  torch::NoGradGuard no_grad;
  at::Tensor flat = Flatten(tensors);
  absl::Status sync_status;
  auto sync = [&](absl::Span<float> values) { sync_status = leader_->Sync(values, *step); };
  bool leader_has_result = false;
  if (absl::Status failure = Exchange(flat, /*average_first=*/true, sync, &leader_has_result);
      !failure.ok()) {
    if (absl::Status s =
            Recover(std::move(failure), tensors, flat, step, leader_has_result, &sync_status);
        !s.ok()) {
      return s;
    }
  }
  Unflatten(flat, tensors);
  // Every rank follows the run's global step (the leader's, once it took the round's result
  // or the committed model) and learns whether the run ended, so that no rank trains past it.
  // It also tells every rank how the round went, so that all of them decide alike (e.g.
  // whether to try the run's last round again).
  const bool took = leader_ != nullptr && (sync_status.ok() || absl::IsOutOfRange(sync_status) ||
                                           StaleRoundOf(sync_status).has_value());
  // The code: the leader's round's status code (OUT_OF_RANGE: the run ended, and the leader
  // took its final model).
  absl::StatusOr<std::pair<int, int64_t>> follow =
      BroadcastCodeAndStep(intra(), static_cast<int>(sync_status.code()),
                           took ? leader_->global_step() : *step, tensors.front().device());
  if (!follow.ok()) {
    // A rank died just now: the next collective fails and the group re-forms then.
    LogWarning(absl::StrCat("could not share the global step: ", follow.status().ToString()));
    return sync_status;
  }
  *step = follow->second;
  const auto code = static_cast<absl::StatusCode>(follow->first);
  if (sync_status.ok() && code == absl::StatusCode::kOutOfRange) {
    return absl::OutOfRangeError("the run ended; the node leader took its final model");
  }
  if (sync_status.ok() && code != absl::StatusCode::kOk) {
    return absl::Status(code,
                        "the node leader's round did not commit with this node (see its log)");
  }
  return sync_status;
}

absl::Status HierarchicalAverager::Recover(absl::Status failure,
                                           const std::vector<at::Tensor>& tensors, at::Tensor& flat,
                                           int64_t* step, bool leader_has_result,
                                           absl::Status* sync_status) {
  const at::Device device = tensors.front().device();
  while (!failure.ok()) {
    LogWarning(absl::StrCat("node group generation ", group_->generation(),
                            ": a collective at step ", *step, " failed (", failure.message(),
                            "); re-forming with the ranks left"));
    if (absl::Status s = group_->Reform(); !s.ok()) return health_ = s;
    if (const int lead = group_->members().front(); lead != leader_rank_) {
      // The leader died (its lock is free), with whatever it held of the round.
      const int dead = leader_rank_;
      leader_rank_ = lead;
      leader_has_result = false;
      if (!take_lead_) {
        return health_ = absl::FailedPreconditionError(absl::StrCat(
                   "the node leader (local rank ", dead, ") died and no rank may take over"));
      }
      if (lead == group_->local_rank()) {
        absl::StatusOr<NodeLeader*> taken = take_lead_(dead);
        if (!taken.ok()) {
          return health_ = absl::Status(
                     taken.status().code(),
                     absl::StrCat("taking over the node's lead: ", taken.status().message()));
        }
        leader_ = *taken;
      }
      LogWarning(absl::StrCat("the node leader (local rank ", dead, ") died; local rank ", lead,
                              " leads the node from now on"));
    }
    if (leader_ != nullptr) leader_->SetNodeWorkers(static_cast<int>(group_->members().size()));
    // The leader's state decides: its step, and whether it holds the round's result.
    absl::StatusOr<std::pair<int, int64_t>> plan =
        BroadcastCodeAndStep(intra(), leader_has_result ? 1 : 0, *step, device);
    if (!plan.ok()) {
      failure = plan.status();
      continue;
    }
    *step = plan->second;
    if (plan->first == 1) {
      failure = intra().Broadcast(flat);  // the leader's result (it holds it in `flat`)
    } else {
      flat = Flatten(tensors);
      auto sync = [&](absl::Span<float> values) { *sync_status = leader_->Sync(values, *step); };
      failure = Exchange(flat, /*average_first=*/true, sync, &leader_has_result);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> HierarchicalAverager::Start(const std::vector<at::Tensor>& tensors) {
  torch::NoGradGuard no_grad;
  at::Tensor flat = Flatten(tensors);
  absl::Status status;
  bool leader_has_result = false;
  if (absl::Status s = Exchange(
          flat, /*average_first=*/false,
          [&](absl::Span<float> values) { status = leader_->Start(values); }, &leader_has_result);
      !s.ok()) {
    return s;
  }
  Unflatten(flat, tensors);
  // Every rank learns whether its leader got the initial model, so that none trains on, and
  // the global step to resume at.
  LOCALSGD_ASSIGN_OR_RETURN(
      const auto info,
      BroadcastCodeAndStep(intra(), leader_ != nullptr && status.ok() ? 1 : 0,
                           leader_ != nullptr && status.ok() ? leader_->global_step() : 0,
                           tensors.front().device()));
  if (!status.ok()) return status;
  if (info.first != 1) {
    return absl::UnavailableError("the node leader could not get the initial model");
  }
  return info.second;
}

}  // namespace localsgd
