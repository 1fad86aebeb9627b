#include "worker/unsynced_bound.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "worker/last_step.h"

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
      !WorthAnotherTry(status)) {
    return status;
  }
  LogWarning(absl::StrCat("trained ", local_sgd.unsynced_steps(),
                          " steps since the last round this node took (max_unsynced_steps ",
                          bound.max_unsynced_steps, "): waiting for a round at step ",
                          local_sgd.steps(), " (", status.message(), ")"));
  if (bound.on_wait) bound.on_wait(local_sgd.steps(), local_sgd.unsynced_steps());
  const absl::Time start = absl::Now();
  // Each new reason the round failed is said, and the same one again every kNoteEvery.
  std::string said(status.message());
  absl::Time next_note = start + kNoteEvery;
  while (past_bound() && WorthAnotherTry(status) && !(bound.stop && bound.stop())) {
    if (averager != nullptr && !averager->Health().ok()) break;
    absl::SleepFor(bound.retry_every);
    status = local_sgd.Resync();
    if (status.ok() || !past_bound()) break;
    if (const absl::Time now = absl::Now(); status.message() != said || now >= next_note) {
      LogWarning(absl::StrCat("still waiting for a round at step ", local_sgd.steps(), " after ",
                              absl::FormatDuration(absl::Trunc(now - start, absl::Seconds(1))),
                              ": ", status.ToString()));
      said = std::string(status.message());
      next_note = now + kNoteEvery;
    }
  }
  LogInfo(absl::StrCat("waited ", absl::FormatDuration(absl::Now() - start),
                       " for a round: ", status.ok() ? "OK" : status.ToString()));
  return status;
}

}  // namespace localsgd
