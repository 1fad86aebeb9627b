#include "worker/hierarchical_averager.h"

#include <torch/types.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "exchange/sync_stream.h"
#include "worker/flat_model.h"

namespace localsgd {
namespace {

// Broadcasts rank 0's (code, flag, step) to the group (the step in two parts of 2^20, each
// exact in fp32).
struct Shared {
  int code = 0;
  bool flag = false;
  int64_t step = 0;
  int fragment = -1;
};
absl::StatusOr<Shared> BroadcastFromLeader(IntraNodeAverager& intra, Shared mine,
                                           const at::Device& device) {
  constexpr int64_t kPart = int64_t{1} << 20;
  at::Tensor info =
      torch::tensor({static_cast<float>(mine.code), mine.flag ? 1.0f : 0.0f,
                     static_cast<float>(mine.step / kPart), static_cast<float>(mine.step % kPart),
                     static_cast<float>(mine.fragment)},
                    torch::TensorOptions().device(device))
          .contiguous();
  LOCALSGD_RETURN_IF_ERROR(intra.Broadcast(info));
  at::Tensor host = info.to(torch::kCPU);
  return Shared{static_cast<int>(host[0].item<float>()), host[1].item<float>() != 0,
                static_cast<int64_t>(host[2].item<float>()) * kPart +
                    static_cast<int64_t>(host[3].item<float>()),
                static_cast<int>(host[4].item<float>())};
}

// Whether the leader's round left it holding a model every rank takes: the round's result,
// the run's model after rounds it missed (stale), or the run's final model (OUT_OF_RANGE).
bool TookModel(const absl::Status& status) {
  return status.ok() || absl::IsOutOfRange(status) || StaleRoundOf(status).has_value();
}

}  // namespace

HierarchicalAverager::HierarchicalAverager(NodeGroup* group, NodeLeader* leader, TakeLead take_lead,
                                           FragmentPlan fragments)
    : group_(group),
      leader_(leader),
      take_lead_(std::move(take_lead)),
      fragments_(std::move(fragments)),
      leader_rank_(group->members().front()) {}

HierarchicalAverager::~HierarchicalAverager() {
  if (in_flight_ != nullptr && in_flight_->round.joinable()) in_flight_->round.join();
}

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

absl::Status HierarchicalAverager::Average(const std::vector<at::Tensor>& tensors, int fragment,
                                           int64_t* step) {
  if (!health_.ok()) return health_;
  return AverageNow(absl::OkStatus(), tensors, fragment, step);
}

absl::Status HierarchicalAverager::AverageNow(absl::Status failure,
                                              const std::vector<at::Tensor>& tensors, int fragment,
                                              int64_t* step) {
  at::NoGradGuard no_grad;
  const ValueRange range = RangeOf(fragment, tensors);
  // A node of one rank averages nothing within it: its round reads and writes the tensors in
  // place when they lie in one buffer (a model-sized copy fewer).
  at::Tensor flat = intra().size() == 1 ? FlatView(tensors, range) : Flatten(tensors, range);
  absl::Status sync_status;
  bool leader_has_result = false;
  if (failure.ok()) {
    failure = Exchange(
        flat, /*average_first=*/true,
        [&](absl::Span<float> values) {
          sync_status = leader_->Sync(values, *step, fragment, trained_steps_);
        },
        &leader_has_result);
  }
  LOCALSGD_ASSIGN_OR_RETURN(std::optional<Verdict> verdict,
                            Conclude(
                                std::move(failure), flat, [&] { return Flatten(tensors, range); },
                                fragment, step, leader_has_result, &sync_status));
  if (!verdict.has_value()) {
    Unflatten(flat, tensors, range);
    return sync_status;
  }
  LOCALSGD_ASSIGN_OR_RETURN(const bool took_run_model, TakeRunModel(*verdict, tensors));
  if (!took_run_model) Unflatten(flat, tensors, range);
  // Every rank follows the run's global step (the leader's, once it took the round's result
  // or the committed model) and learns whether the run ended, so that no rank trains past it.
  *step = verdict->step;
  return StatusOfRound(sync_status, *verdict);
}

absl::Status HierarchicalAverager::Launch(const std::vector<at::Tensor>& tensors, int fragment,
                                          int64_t* step) {
  if (!health_.ok()) return health_;
  if (in_flight_ != nullptr) {
    return absl::FailedPreconditionError("Launch: a round is in flight already (Merge it first)");
  }
  at::NoGradGuard no_grad;
  auto round = std::make_unique<InFlight>();
  round->fragment = fragment;
  round->range = RangeOf(fragment, tensors);
  round->step = *step;
  round->snapshot = Flatten(tensors, round->range);
  at::Tensor mean = round->snapshot.clone();
  if (absl::Status failure = intra().AllReduceMean(mean); !failure.ok()) {
    // A rank of the node died: this round runs at once among the ranks left (the tensors are
    // still the snapshot, so its result is what Merge would make of it).
    return AverageNow(std::move(failure), tensors, fragment, step);
  }
  if (leader_ != nullptr) {
    round->values = mean.to(torch::kCPU);  // `mean` is this round's own copy
    round->round = std::thread([leader = leader_, r = round.get(), steps = trained_steps_] {
      r->status = leader->Sync(
          absl::MakeSpan(r->values.data_ptr<float>(), static_cast<size_t>(r->values.numel())),
          r->step, r->fragment, steps);
    });
  }
  in_flight_ = std::move(round);
  return absl::OkStatus();
}

absl::Status HierarchicalAverager::Merge(const std::vector<at::Tensor>& tensors, int64_t* step) {
  if (in_flight_ == nullptr) return absl::OkStatus();
  const std::unique_ptr<InFlight> round = std::move(in_flight_);
  if (round->round.joinable()) round->round.join();
  if (!health_.ok()) return health_;
  at::NoGradGuard no_grad;
  // The leader's values (the round's result, or the node's mean when it did not commit) to
  // every rank, then its verdict.
  at::Tensor flat = leader_ != nullptr ? round->values.to(round->snapshot.device())
                                       : at::empty_like(round->snapshot);
  absl::Status sync_status = round->status;
  int64_t at = round->step;
  LOCALSGD_ASSIGN_OR_RETURN(
      std::optional<Verdict> verdict,
      Conclude(
          intra().Broadcast(flat), flat, [&] { return round->snapshot.clone(); }, round->fragment,
          &at, /*leader_has_result=*/leader_ != nullptr, &sync_status));
  if (!verdict.has_value()) return sync_status;
  LOCALSGD_ASSIGN_OR_RETURN(const bool took_run_model, TakeRunModel(*verdict, tensors));
  if (took_run_model) {
    *step = verdict->step;  // the run's model: the progress since the snapshot is not kept
  } else if (verdict->took && verdict->code == absl::StatusCode::kOutOfRange) {
    Unflatten(flat, tensors, round->range);  // the run's final model: nothing more to train
    *step = verdict->step;
  } else if (verdict->took) {
    MergeRound(flat, round->snapshot, tensors, round->range);
    *step = verdict->step + (*step - round->step);
  }
  return StatusOfRound(sync_status, *verdict);
}

absl::StatusOr<std::optional<HierarchicalAverager::Verdict>> HierarchicalAverager::Conclude(
    absl::Status failure, at::Tensor& flat, const Redo& redo, int fragment, int64_t* step,
    bool leader_has_result, absl::Status* sync_status) {
  if (!failure.ok()) {
    LOCALSGD_RETURN_IF_ERROR(
        Recover(std::move(failure), redo, flat, fragment, step, leader_has_result, sync_status));
  }
  // The leader's round's status code (OUT_OF_RANGE: the run ended, and the leader took its
  // final model) and step, so that every rank decides alike (e.g. whether to try the run's
  // last round again).
  const bool took = leader_ != nullptr && TookModel(*sync_status);
  absl::StatusOr<Shared> shared = BroadcastFromLeader(
      intra(),
      Shared{static_cast<int>(sync_status->code()), took, took ? leader_->global_step() : *step,
             RoundFragmentOf(*sync_status).value_or(-1)},
      flat.device());
  if (!shared.ok()) {
    LogWarning(absl::StrCat("could not share the round's outcome: ", shared.status().ToString()));
    return std::optional<Verdict>();
  }
  return std::optional<Verdict>(Verdict{static_cast<absl::StatusCode>(shared->code), shared->flag,
                                        shared->step, shared->fragment});
}

absl::Status HierarchicalAverager::StatusOfRound(const absl::Status& sync_status,
                                                 const Verdict& verdict) {
  if (sync_status.ok() && verdict.code == absl::StatusCode::kOutOfRange) {
    return absl::OutOfRangeError("the run ended; the node leader took its final model");
  }
  if (sync_status.ok() && verdict.took && verdict.code != absl::StatusCode::kOk) {
    // The leader took the run's model (a round committed without the node): every rank says
    // so alike (LocalSGD::unsynced_steps counts from it).
    v1::StaleRound stale;
    stale.set_global_step(verdict.step);
    return StaleRoundError(stale, "the node leader took the run's model (see its log)");
  }
  if (sync_status.ok() && verdict.code != absl::StatusCode::kOk) {
    // Every rank learns the open round's fragment when the leader's was another.
    v1::RoundFragment round;
    round.set_fragment(verdict.round_fragment);
    const absl::Status status(
        verdict.code, "the node leader's round did not commit with this node (see its log)");
    return verdict.round_fragment >= 0 ? WithRoundFragment(status, round) : status;
  }
  return sync_status;
}

absl::Status HierarchicalAverager::Recover(absl::Status failure, const Redo& redo, at::Tensor& flat,
                                           int fragment, int64_t* step, bool leader_has_result,
                                           absl::Status* sync_status) {
  const at::Device device = flat.device();
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
    absl::StatusOr<Shared> plan =
        BroadcastFromLeader(intra(), Shared{0, leader_has_result, *step, fragment}, device);
    if (!plan.ok()) {
      failure = plan.status();
      continue;
    }
    *step = plan->step;
    // Ranks that were at rounds of different fragments when the node broke (the leader died
    // after some of them had its last round's outcome) cannot redo one round together: every
    // rank learns whether any was, and then all of them give this round up alike.
    at::Tensor apart = torch::tensor({plan->fragment == fragment ? 0.0f : 1.0f},
                                     torch::TensorOptions().device(device));
    if (failure = intra().AllReduceMean(apart); !failure.ok()) continue;
    if (apart.item<float>() > 0) {
      return absl::AbortedError(absl::StrCat(
          "the node re-formed with its ranks at rounds of different fragments (this rank's: ",
          fragment, "): this round is given up"));
    }
    if (plan->flag) {
      failure = intra().Broadcast(flat);  // the leader's result (it holds it in `flat`)
    } else {
      flat = redo();
      failure = Exchange(
          flat, /*average_first=*/true,
          [&](absl::Span<float> values) {
            *sync_status = leader_->Sync(values, *step, fragment, trained_steps_);
          },
          &leader_has_result);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> HierarchicalAverager::TakeRunModel(const Verdict& verdict,
                                                        const std::vector<at::Tensor>& tensors) {
  if (fragments_.size() == 1 || !verdict.took || verdict.code == absl::StatusCode::kOk) {
    return false;
  }
  const ValueRange all = WholeModel(tensors);
  at::Tensor flat = at::empty({all.size}, tensors.front().options().dtype(at::kFloat));
  if (leader_ != nullptr) {
    const absl::Span<const float> global = leader_->global();
    flat.copy_(torch::from_blob(const_cast<float*>(global.data()), {all.size}));
  }
  LOCALSGD_RETURN_IF_ERROR(intra().Broadcast(flat));
  Unflatten(flat, tensors, all);
  return true;
}

absl::StatusOr<int64_t> HierarchicalAverager::Start(const std::vector<at::Tensor>& tensors) {
  at::NoGradGuard no_grad;
  const ValueRange all = WholeModel(tensors);
  at::Tensor flat = Flatten(tensors, all);
  absl::Status status;
  bool leader_has_result = false;
  if (absl::Status s = Exchange(
          flat, /*average_first=*/false,
          [&](absl::Span<float> values) { status = leader_->Start(values); }, &leader_has_result);
      !s.ok()) {
    return s;
  }
  Unflatten(flat, tensors, all);
  // Every rank learns whether its leader got the initial model, so that none trains on, and
  // the global step to resume at.
  const bool got = leader_ != nullptr && status.ok();
  LOCALSGD_ASSIGN_OR_RETURN(
      const Shared info,
      BroadcastFromLeader(intra(), Shared{0, got, got ? leader_->global_step() : 0},
                          tensors.front().device()));
  if (!status.ok()) return status;
  if (!info.flag) return absl::UnavailableError("the node leader could not get the initial model");
  return info.step;
}

}  // namespace localsgd
