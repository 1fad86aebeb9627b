#include "worker/last_step.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log.h"

namespace localsgd {

bool WorthAnotherTry(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status) ||
         absl::IsAborted(status) || absl::IsFailedPrecondition(status) ||
         absl::IsNotFound(status) ||
         (absl::IsPermissionDenied(status) &&
          absl::StartsWith(status.message(), "member_credential"));
}

absl::Status SyncLastStep(LocalSGD& local_sgd, const ParameterAverager* averager,
                          int64_t completed_before, absl::Status status) {
  const int64_t step = local_sgd.steps();
  if (local_sgd.round_in_flight()) status = local_sgd.MergeNow();
  // The run's last round is every fragment's last sync (the run completes once all of them
  // synced here): also when the last step is not a multiple of local_sgd_steps.
  if (status.ok()) status = local_sgd.Resync();
  const bool boundary = local_sgd.rounds_completed() != completed_before;
  for (int attempt = 1; boundary && attempt <= kLastRoundAttempts && WorthAnotherTry(status) &&
                        local_sgd.steps() == step;
       ++attempt) {
    if (averager != nullptr && !averager->Health().ok()) break;
    LogWarning(absl::StrCat("the run's last round failed here (", status.message(),
                            "); trying again (", attempt, " of ", kLastRoundAttempts, ")"));
    absl::SleepFor(absl::Seconds(1));
    status = local_sgd.Resync();
  }
  return status;
}

}  // namespace localsgd
