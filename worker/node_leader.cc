#include "worker/node_leader.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "common/status_macros.h"

namespace localsgd {
namespace {

// A wait for the coordinator that may end by itself: it is restarting or cut off
// (UNAVAILABLE, DEADLINE_EXCEEDED, and what a connection reset mid-call ends with: CANCELLED,
// UNKNOWN, INTERNAL, ABORTED), or it lost this member's lease and the heartbeat is joining it
// again (NOT_FOUND naming the member_id field; a run that is not found stays so), or it joined
// again while this call carried the previous credential (PERMISSION_DENIED naming
// member_credential).
bool IsTransient(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kAborted:
      return true;
    case absl::StatusCode::kNotFound:
      return absl::StartsWith(status.message(), "member_id");
    case absl::StatusCode::kPermissionDenied:
      return absl::StartsWith(status.message(), "member_credential");
    default:
      return false;
  }
}
}  // namespace

NodeLeader::NodeLeader(ModelClient* models, Exchange* exchange, SyncMember member,
                       ChunkLayout layout, absl::Duration round_timeout, FragmentPlan fragments)
    : models_(models),
      exchange_(exchange),
      member_(std::move(member)),
      layout_(layout),
      round_timeout_(round_timeout),
      fragments_(std::move(fragments)) {}

absl::Status NodeLeader::Start(absl::Span<float> params) {
  // Transient failures are retried up to the round timeout in all (the node's other ranks wait
  // longer than that in their broadcast).
  const absl::Time give_up = absl::Now() + round_timeout_;
  absl::Duration backoff = absl::Milliseconds(200);
  while (true) {
    const absl::Duration left = std::max(give_up - absl::Now(), absl::Seconds(1));
    absl::Status status = models_->InitModel(member_.run_id, member_.member_id,
                                             member_.CurrentCredential(), params, layout_, left);
    if (status.ok() || absl::IsAlreadyExists(status)) status = Adopt(left);
    if (status.ok() && global_.size() != params.size()) {
      status = absl::FailedPreconditionError(absl::StrCat(
          "this worker's model has ", params.size(), " values, the run's global model has ",
          global_.size(), ": every worker must train the same model"));
    }
    if (status.ok()) std::copy(global_.begin(), global_.end(), params.begin());
    if (!IsTransient(status) || absl::Now() + backoff > give_up) return status;
    LogWarning(absl::StrCat("initial model: ", status.ToString(), "; retrying in ",
                            absl::FormatDuration(backoff)));
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(2));
  }
}

absl::Status NodeLeader::Adopt(absl::Duration timeout) {
  const bool with_momentum = exchange_->keeps_momentum();
  LOCALSGD_ASSIGN_OR_RETURN(ModelClient::Model model,
                            models_->FetchModel(member_.run_id, timeout, with_momentum));
  if (static_cast<int64_t>(model.values.size()) != layout_.num_values) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this worker's model has ", layout_.num_values, " values, the run's global model has ",
        model.values.size(), ": every worker must train the same model"));
  }
  if (with_momentum && model.momentum.size() != model.values.size()) {
    return absl::FailedPreconditionError("the coordinator sent no outer momentum");
  }
  global_ = std::move(model.values);
  momentum_ = std::move(model.momentum);
  round_ = model.round;
  global_step_ = model.global_step;
  return absl::OkStatus();
}

absl::Status NodeLeader::Sync(absl::Span<float> params, int64_t step, int fragment) {
  const size_t begin = static_cast<size_t>(fragments_.begin(fragment));
  const auto take = [&] {  // the fragment's values of global_ into params
    std::copy(global_.begin() + begin, global_.begin() + begin + params.size(), params.begin());
  };
  if (global_.empty()) {  // took over: start from the committed model
    LOCALSGD_RETURN_IF_ERROR(Adopt(round_timeout_));
    take();
    return absl::OkStatus();
  }
  if (begin + params.size() > global_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("fragment ", fragment, ": ", params.size(),
                                                   " values from ", begin,
                                                   " do not fit the model's ", global_.size()));
  }
  absl::Span<float> momentum = absl::MakeSpan(momentum_);
  ExchangeRound round{round_ + 1,
                      step,
                      params,
                      absl::MakeSpan(global_).subspan(begin, params.size()),
                      momentum.empty() ? momentum : momentum.subspan(begin, params.size()),
                      round_timeout_,
                      fragment,
                      static_cast<int64_t>(global_.size())};
  absl::StatusOr<ExchangeResult> result = exchange_->Run(member_, round);
  if (result.ok()) {
    round_ = result->round;
    global_step_ = result->global_step;
    take();
    return absl::OkStatus();
  }
  std::optional<v1::StaleRound> stale = StaleRoundOf(result.status());
  if (stale.has_value()) {
    // A round committed without this node: take the agreed model and go on from there.
    LOCALSGD_RETURN_IF_ERROR(Adopt(round_timeout_));
    take();
    if (stale->run_ended()) {
      return absl::OutOfRangeError(absl::StrCat("the run ended at round ", round_, ", global step ",
                                                global_step_, "; this node holds its final model"));
    }
  }
  return result.status();
}

}  // namespace localsgd
