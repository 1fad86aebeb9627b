#include "worker/training_steps.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "common/retry.h"
#include "common/status_macros.h"
#include "worker/last_step.h"

namespace localsgd {
namespace {
// How often Step asks whether the run halted (a copy of the run under a lock).
constexpr absl::Duration kLookEvery = absl::Milliseconds(100);
}  // namespace

TrainingSteps::TrainingSteps(ParameterAverager* averager, std::vector<at::Tensor> tensors,
                             Options options)
    : averager_(averager),
      local_sgd_(averager, std::move(tensors), options.schedule, options.enabled,
                 options.first_step, options.pace),
      options_(std::move(options)) {
  bound_.max_unsynced_steps = options_.max_unsynced_steps;
  bound_.stop = [this] { return options_.stop() || !options_.halted().ok(); };
  bound_.on_wait = options_.on_step;
}

void TrainingSteps::set_last_step(int64_t step) {
  last_step_ = step;
  local_sgd_.set_last_step(step);
}

absl::Status TrainingSteps::Step() {
  if (ended_) return absl::OutOfRangeError("the run has ended");
  const int64_t step = steps() + 1;
  const int64_t completed = rounds_completed();
  absl::Status status = local_sgd_.Step();
  if (last_step_ > 0 && steps() == last_step_) {  // the last step, or a round held it there
    status = SyncLastStep(local_sgd_, averager_, completed, std::move(status));
  } else {
    status = WaitWithinBound(local_sgd_, averager_, bound_, completed, std::move(status));
  }
  if (averager_ != nullptr) LOCALSGD_RETURN_IF_ERROR(averager_->Health());
  if (steps() != step + local_sgd_.paced_skip()) {
    // The run's global step, which the node follows (after an outage, or when the node
    // re-formed after one of its ranks died and goes on from its leader's step).
    LogInfo(absl::StrCat("going on from the run's step ", steps(), " (this rank was at step ", step,
                         ")"));
  }
  if (absl::IsOutOfRange(status)) {
    // The run ended without this node's last steps: it holds the run's final model now.
    LogInfo(absl::StrCat("stopping at step ", steps(), ": ", status.message()));
    ended_ = true;
    return status;
  }
  if (!status.ok()) {
    LogWarning(absl::StrCat("sync at step ", steps(), ": ", status.ToString(),
                            " (training goes on with local weights)"));
  }
  options_.on_step(steps(), unsynced_steps());
  if (const absl::Time now = absl::Now(); now >= next_look_) {
    next_look_ = now + kLookEvery;
    if (absl::Status halted = options_.halted(); !halted.ok()) {
      ended_ = halted_ = true;
      return halted;
    }
  }
  return absl::OkStatus();
}

absl::Status TrainingSteps::Finish() {
  if (halted_) local_sgd_.Abandon();
  RetryPolicy policy = LastRoundRetry([this] {
    return (averager_ != nullptr && !averager_->Health().ok()) || options_.run_ended() ||
           options_.stop();
  });
  // At the run's last step SyncLastStep has tried it again already.
  if (last_step_ > 0 && steps() >= last_step_) policy.max_retries = 0;
  const absl::Status last = RetryAfter(
      policy, local_sgd_.Finish(), [this] { return local_sgd_.Resync(); },
      [&](const absl::Status& why, int retry, absl::Duration) {
        LogWarning(absl::StrCat("the last sync failed (", why.message(), "); trying again (", retry,
                                " of ", policy.max_retries, ")"));
      });
  if (!last.ok() && !absl::IsOutOfRange(last)) {
    LogWarning(absl::StrCat("the last sync failed: ", last.ToString()));
  }
  return averager_ != nullptr ? averager_->Health() : absl::OkStatus();
}

}  // namespace localsgd
