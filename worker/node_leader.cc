#include "worker/node_leader.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "common/retry.h"
#include "common/status_macros.h"

namespace localsgd {

NodeLeader::NodeLeader(ModelClient* models, Exchange* exchange, SyncMember member,
                       ChunkLayout layout, absl::Duration round_timeout, FragmentPlan fragments,
                       HeldModel* held, const ModelFetcher* fetcher)
    : models_(models),
      fetcher_(fetcher),
      exchange_(exchange),
      member_(std::move(member)),
      layout_(layout),
      round_timeout_(round_timeout),
      fragments_(std::move(fragments)),
      held_(held != nullptr ? held : &own_held_) {}

absl::Status NodeLeader::Start(absl::Span<float> params) {
  // Transient failures are retried up to the round timeout in all (the node's other ranks wait
  // longer than that in their broadcast).
  RetryPolicy policy;
  policy.transient = IsTransientCall;
  policy.backoff = absl::Milliseconds(200);
  policy.max_backoff = absl::Seconds(2);
  policy.budget = round_timeout_;
  const absl::Time give_up = absl::Now() + round_timeout_;
  return Retry(
      policy,
      [&] {
        absl::Status status = StartOnce(params, std::max(give_up - absl::Now(), absl::Seconds(1)));
        if (!IsTransientCall(status)) resume_.reset();
        return status;
      },
      [](const absl::Status& why, int, absl::Duration pause) {
        LogWarning(absl::StrCat("initial model: ", why.ToString(), "; retrying in ",
                                absl::FormatDuration(pause)));
      });
}

absl::Status NodeLeader::StartOnce(absl::Span<float> params, absl::Duration timeout) {
  const bool resuming = resume_.has_value();
  ModelClient::Checkpoint offer;
  if (resuming) offer = {resume_->round, resume_->global_step, resume_->momentum};
  absl::StatusOr<v1::InitModelResponse> init =
      models_->InitModel(member_.run_id, member_.member_id, member_.CurrentCredential(),
                         resuming ? absl::Span<const float>(resume_->global) : params, layout_,
                         timeout, resuming ? &offer : nullptr);
  absl::Status status = init.status();
  if (init.ok()) {  // the run's model is this node's: no need to fetch it back
    std::vector<float> values, momentum;
    if (resuming) {  // (ResumeFrom checked its momentum)
      values = std::move(resume_->global);
      momentum = std::move(resume_->momentum);
      LogInfo(absl::StrCat("the run goes on from the checkpoint of round ", resume_->round,
                           " (global step ", resume_->global_step, ") as round ", init->round()));
    } else {
      values.assign(params.begin(), params.end());
      momentum.assign(exchange_->keeps_momentum() ? params.size() : 0, 0.0f);
    }
    held_->Install(member_.run_id, init->round(), init->global_step(), std::move(values),
                   std::move(momentum));
    adopted_ = true;
  } else if (absl::IsAlreadyExists(status)) {
    status = Adopt(timeout);
  } else if (resuming && !IsTransientCall(status)) {
    LogWarning(absl::StrCat("the checkpoint of round ", resume_->round, " was refused (",
                            status.ToString(), "); starting without it"));
    resume_.reset();
    return StartOnce(params, timeout);
  }
  const std::vector<float>& global = held_->values();
  if (status.ok() && global.size() != params.size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this worker's model has ", params.size(), " values, the run's global model has ",
        global.size(), ": every worker must train the same model"));
  }
  if (status.ok()) std::copy(global.begin(), global.end(), params.begin());
  return status;
}

absl::Status NodeLeader::ResumeFrom(ModelCheckpoint checkpoint) {
  if (checkpoint.run_id != member_.run_id) {
    return absl::FailedPreconditionError(
        absl::StrCat("it holds run ", checkpoint.run_id, ", not run ", member_.run_id));
  }
  if (static_cast<int64_t>(checkpoint.global.size()) != layout_.num_values) {
    return absl::FailedPreconditionError(absl::StrCat(
        "it holds ", checkpoint.global.size(), " values, the model has ", layout_.num_values));
  }
  const size_t momentum = exchange_->keeps_momentum() ? checkpoint.global.size() : 0;
  if (checkpoint.momentum.size() != momentum) {
    return absl::FailedPreconditionError(absl::StrCat(
        "it holds ", checkpoint.momentum.size(), " momentum values, the run's outer optimizer ",
        momentum > 0 ? "needs one per value" : "has no momentum"));
  }
  resume_ = std::move(checkpoint);
  return absl::OkStatus();
}

absl::Status NodeLeader::Adopt(absl::Duration timeout) {
  const bool with_momentum = exchange_->keeps_momentum();
  ModelClient::Model model;
  if (fetcher_ != nullptr) {
    LOCALSGD_ASSIGN_OR_RETURN(ModelFetcher::Fetched fetched,
                              fetcher_->Fetch(member_.run_id, timeout, with_momentum));
    LogInfo(absl::StrCat("adopted the run's model of round ", fetched.model.round, " from ",
                         fetched.source));
    model = std::move(fetched.model);
  } else {
    LOCALSGD_ASSIGN_OR_RETURN(model, models_->FetchModel(member_.run_id, timeout, with_momentum));
  }
  if (static_cast<int64_t>(model.values.size()) != layout_.num_values) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this worker's model has ", layout_.num_values, " values, the run's global model has ",
        model.values.size(), ": every worker must train the same model"));
  }
  if (with_momentum && model.momentum.size() != model.values.size()) {
    return absl::FailedPreconditionError("the coordinator sent no outer momentum");
  }
  held_->Install(member_.run_id, model.round, model.global_step, std::move(model.values),
                 std::move(model.momentum));
  adopted_ = true;
  return absl::OkStatus();
}

absl::Status NodeLeader::Sync(absl::Span<float> params, int64_t step, int fragment,
                              int64_t trained_steps) {
  const size_t begin = static_cast<size_t>(fragments_.begin(fragment));
  const auto take = [&] {  // the fragment's values of the global model into params
    const std::vector<float>& global = held_->values();
    std::copy(global.begin() + begin, global.begin() + begin + params.size(), params.begin());
  };
  if (!adopted_) {  // took over: start from the committed model, as a stale member does
    LOCALSGD_RETURN_IF_ERROR(Adopt(round_timeout_));
    take();
    v1::StaleRound adopted;
    adopted.set_committed_round(held_->round());
    adopted.set_global_step(held_->global_step());
    return StaleRoundError(adopted, absl::StrCat("this rank took over the node's lead and adopted "
                                                 "the run's model of round ",
                                                 held_->round(), "; sync again"));
  }
  std::vector<float>& global = held_->values();
  if (begin + params.size() > global.size()) {
    return absl::InvalidArgumentError(absl::StrCat("fragment ", fragment, ": ", params.size(),
                                                   " values from ", begin,
                                                   " do not fit the model's ", global.size()));
  }
  absl::Span<float> momentum = absl::MakeSpan(held_->momentum());
  ExchangeRound round{held_->round() + 1,
                      step,
                      params,
                      absl::MakeSpan(global).subspan(begin, params.size()),
                      momentum.empty() ? momentum : momentum.subspan(begin, params.size()),
                      round_timeout_,
                      fragment,
                      static_cast<int64_t>(global.size()),
                      held_,
                      static_cast<int64_t>(begin)};
  SyncMember member = member_;
  if (trained_steps > 0) member.weight = static_cast<double>(member.num_workers) * trained_steps;
  absl::StatusOr<ExchangeResult> result = exchange_->Run(member, round);
  if (result.ok()) {
    take();
    return absl::OkStatus();
  }
  std::optional<v1::StaleRound> stale = StaleRoundOf(result.status());
  if (stale.has_value()) {
    // A round committed without this node: take the agreed model and go on from there (held
    // already when the exchange applied that round's update it had delivered).
    if (held_->run_id() != member_.run_id || held_->round() != stale->committed_round()) {
      LOCALSGD_RETURN_IF_ERROR(Adopt(round_timeout_));
    }
    take();
    if (stale->run_ended()) {
      return absl::OutOfRangeError(absl::StrCat("the run ended at round ", held_->round(),
                                                ", global step ", held_->global_step(),
                                                "; this node holds its final model"));
    }
  }
  return result.status();
}

}  // namespace localsgd
