#include "common/retry.h"

#include "absl/strings/match.h"

namespace localsgd {

bool IsUnreachable(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status);
}

namespace {

bool IsRejoining(const absl::Status& status) {
  return (absl::IsNotFound(status) && absl::StartsWith(status.message(), "member_id")) ||
         (absl::IsPermissionDenied(status) &&
          absl::StartsWith(status.message(), "member_credential"));
}

}  // namespace

bool IsTransientCall(const absl::Status& status) {
  return IsUnreachable(status) || absl::IsCancelled(status) || absl::IsUnknown(status) ||
         absl::IsInternal(status) || absl::IsAborted(status) || IsRejoining(status);
}

bool IsPassingRoundFailure(const absl::Status& status) {
  return IsUnreachable(status) || absl::IsAborted(status) || absl::IsFailedPrecondition(status) ||
         absl::IsNotFound(status) || IsRejoining(status);
}

namespace retry_internal {

bool Pause(absl::Duration pause, const std::function<bool()>& stop, const RetryClock& clock) {
  const absl::Time until = clock.now() + pause;
  for (absl::Time now = clock.now(); now < until; now = clock.now()) {
    if (stop && stop()) return false;
    clock.sleep(std::min(until - now, absl::Milliseconds(100)));
  }
  return !(stop && stop());
}

}  // namespace retry_internal
}  // namespace localsgd
