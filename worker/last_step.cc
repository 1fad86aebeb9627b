#include "worker/last_step.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace localsgd {

RetryPolicy LastRoundRetry(std::function<bool()> stop) {
  RetryPolicy policy;
  policy.transient = IsPassingRoundFailure;
  policy.max_retries = 60;
  policy.stop = std::move(stop);
  return policy;
}

absl::Status SyncLastStep(LocalSGD& local_sgd, const ParameterAverager* averager,
                          int64_t completed_before, absl::Status status) {
  const int64_t step = local_sgd.steps();
  if (local_sgd.round_in_flight()) status = local_sgd.MergeNow();
  // The run's last round is every fragment's last sync (the run completes once all of them
  // synced here): also when the last step is not a multiple of local_sgd_steps.
  if (status.ok()) status = local_sgd.Resync();
  if (local_sgd.rounds_completed() == completed_before) return status;
  const RetryPolicy policy = LastRoundRetry([&] {
    return (averager != nullptr && !averager->Health().ok()) || local_sgd.steps() != step;
  });
  return RetryAfter(
      policy, std::move(status), [&] { return local_sgd.Resync(); },
      [&](const absl::Status& why, int retry, absl::Duration) {
        LogWarning(absl::StrCat("the run's last round failed here (", why.message(),
                                "); trying again (", retry, " of ", policy.max_retries, ")"));
      });
}

}  // namespace localsgd
