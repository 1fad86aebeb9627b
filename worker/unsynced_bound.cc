#include "worker/unsynced_bound.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "common/retry.h"

namespace localsgd {
namespace {
constexpr absl::Duration kNoteEvery = absl::Seconds(30);
}  // namespace

absl::Status WaitWithinBound(LocalSGD& local_sgd, const ParameterAverager* averager,
                             const UnsyncedBound& bound, int64_t completed_before,
                             absl::Status status) {
  const auto past_bound = [&] {
    return bound.max_unsynced_steps > 0 && !local_sgd.round_in_flight() &&
           local_sgd.unsynced_steps() >= bound.max_unsynced_steps;
  };
  if (local_sgd.rounds_completed() == completed_before || !past_bound() ||
      !IsPassingRoundFailure(status)) {
    return status;
  }
  LogWarning(absl::StrCat("trained ", local_sgd.unsynced_steps(),
                          " steps since the last round this node took (max_unsynced_steps ",
                          bound.max_unsynced_steps, "): waiting for a round at step ",
                          local_sgd.steps(), " (", status.message(), ")"));
  if (bound.on_wait) bound.on_wait(local_sgd.steps(), local_sgd.unsynced_steps());
  RetryPolicy policy;
  policy.transient = IsPassingRoundFailure;
  policy.backoff = policy.max_backoff = bound.retry_every;
  policy.stop = [&] {
    return !past_bound() || (bound.stop && bound.stop()) ||
           (averager != nullptr && !averager->Health().ok());
  };
  const absl::Time start = absl::Now();
  // Each new reason the round failed is said, and the same one again every kNoteEvery.
  std::string said(status.message());
  absl::Time next_note = start + kNoteEvery;
  status = RetryAfter(
      policy, std::move(status), [&] { return local_sgd.Resync(); },
      [&](const absl::Status& why, int, absl::Duration) {
        if (const absl::Time now = absl::Now(); why.message() != said || now >= next_note) {
          LogWarning(absl::StrCat("still waiting for a round at step ", local_sgd.steps(),
                                  " after ",
                                  absl::FormatDuration(absl::Trunc(now - start, absl::Seconds(1))),
                                  ": ", why.ToString()));
          said = std::string(why.message());
          next_note = now + kNoteEvery;
        }
      });
  LogInfo(absl::StrCat("waited ", absl::FormatDuration(absl::Now() - start),
                       " for a round: ", status.ok() ? "OK" : status.ToString()));
  return status;
}

}  // namespace localsgd
