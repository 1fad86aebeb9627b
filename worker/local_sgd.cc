#include "worker/local_sgd.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "exchange/sync_stream.h"

namespace localsgd {

LocalSGD::LocalSGD(ParameterAverager* averager, std::vector<at::Tensor> tensors,
                   RoundSchedule schedule, bool enabled, int64_t first_step, RoundPace pace)
    : averager_(averager),
      tensors_(std::move(tensors)),
      schedule_(schedule),
      enabled_(enabled),
      steps_(first_step),
      took_at_(first_step),
      synced_at_(static_cast<size_t>(schedule_.fragments()), first_step),
      failed_(static_cast<size_t>(schedule_.fragments()), false),
      pace_(pace),
      trained_(static_cast<size_t>(schedule_.fragments()), 0) {}

LocalSGD::~LocalSGD() {
  absl::Status status = Finish();
  if (!status.ok()) LogWarning(absl::StrCat("LocalSGD: last sync failed: ", status.ToString()));
}

absl::Status LocalSGD::Step() {
  ++steps_;
  paced_skip_ = 0;
  if (!enabled_) return absl::OkStatus();
  if (pace_.paced()) {
    if (window_start_ == absl::InfinitePast()) StartWindow();  // the first
    ++window_steps_;
    for (int64_t& steps : trained_) ++steps;
  }
  // Paced runs: a copy whose window ended before overlap_steps merges now, before its next
  // round.
  const bool window_done = pace_.paced() && pace_.Done(window_steps_, WindowTrained());
  absl::Status merged;
  if (round_in_flight() && (steps_ >= launched_at_ + schedule_.overlap_steps() || window_done)) {
    const int64_t launched_at = launched_at_;
    const int64_t at = steps_;
    merged = IntoPhase(MergeNow(), launched_at);
    // A step the round set (the run's, after a commit without this copy, or one in the open
    // round's phase) has had its round: the next one is the run's next.
    if (steps_ != at) return merged;
  }
  if (window_done && !schedule_.RoundAt(steps_)) {
    // Trained its share of the round's time: on to the run's next round step (never past the
    // last step).
    const int64_t stride = schedule_.local_sgd_steps() / schedule_.fragments();
    const int64_t was = steps_;
    steps_ = (steps_ / stride + 1) * stride;
    HoldAtLastStep();
    paced_skip_ = steps_ - was;
  }
  if (!schedule_.RoundAt(steps_)) return merged;
  const int64_t boundary = steps_;
  const int fragment = schedule_.FragmentAt(steps_);
  window_steps_ = 0;
  if (pace_.paced()) StartWindow();
  return IntoPhase(schedule_.overlap_steps() == 0 ? Sync(fragment) : Launch(fragment), boundary);
}

void LocalSGD::BeforeRound(int fragment) {
  if (pace_.paced()) averager_->SetTrainedSteps(std::max<int64_t>(1, trained_[fragment]));
}

absl::Duration LocalSGD::WindowTrained() const { return absl::Now() - window_start_ - waited_; }

void LocalSGD::StartWindow() {
  window_start_ = absl::Now();
  waited_ = absl::ZeroDuration();
  pace_.Began();
}

void LocalSGD::AfterRound(int fragment, int64_t steps, const absl::Status& status) {
  if (!pace_.paced()) return;
  if (absl::IsOutOfRange(status) || StaleRoundOf(status).has_value()) {
    // The copy took the run's model: what it trained on is not in any delta to come.
    std::fill(trained_.begin(), trained_.end(), 0);
    pace_.LeftOut(pace_.Done(window_steps_, WindowTrained()));
  } else if (status.ok()) {
    trained_[fragment] -= steps;
  }
}

absl::Status LocalSGD::IntoPhase(absl::Status status, int64_t boundary) {
  const std::optional<int> round_fragment = RoundFragmentOf(status);
  if (!round_fragment.has_value()) return status;
  const int64_t moved = schedule_.StepsToPhase(boundary, *round_fragment);
  if (moved > 0) {
    const int64_t was = steps_;
    steps_ += moved;
    HoldAtLastStep();
    LogWarning(absl::StrCat("the open round carries fragment ", *round_fragment,
                            ", this copy's round at step ", boundary,
                            " another: going on from step ", steps_, " (was ", was,
                            "), in the others' phase"));
  }
  return status;
}

void LocalSGD::HoldAtLastStep() {
  if (last_step_ > 0 && steps_ > last_step_) steps_ = last_step_;
}

void LocalSGD::Took(const absl::Status& status) {
  if (status.ok() || absl::IsOutOfRange(status) || StaleRoundOf(status).has_value()) {
    took_at_ = steps_;
  }
}

absl::Status LocalSGD::MergeNow() {
  if (!round_in_flight()) return absl::OkStatus();
  launched_at_ = -1;
  ++rounds_completed_;
  const absl::Time merging = absl::Now();
  absl::Status status = averager_->Merge(tensors_, &steps_);
  waited_ += absl::Now() - merging;
  HoldAtLastStep();
  Took(status);
  // The launch took the delta's steps out; a round that did not commit leaves them to the next.
  if (!status.ok()) trained_[launched_fragment_] += launched_steps_;
  AfterRound(launched_fragment_, 0, status);
  failed_[launched_fragment_] = !status.ok() && !absl::IsOutOfRange(status);
  return status;
}

absl::Status LocalSGD::Finish() {
  if (finished_) return absl::OkStatus();
  finished_ = true;
  if (!enabled_) return absl::OkStatus();
  absl::Status status = MergeNow();
  const int first = schedule_.FragmentAt(steps_);
  for (int i = 0; i < schedule_.fragments() && !absl::IsOutOfRange(status); ++i) {
    const int f = (first + i) % schedule_.fragments();
    if (synced_at_[f] == steps_) continue;
    absl::Status synced = Sync(f);
    if (status.ok() || absl::IsOutOfRange(synced)) status = std::move(synced);
  }
  return status;
}

absl::Status LocalSGD::Resync() {
  absl::Status status;
  const int first = schedule_.FragmentAt(steps_);
  for (int i = 0; i < schedule_.fragments(); ++i) {
    const int f = (first + i) % schedule_.fragments();
    if (synced_at_[f] == steps_ && !failed_[f]) continue;
    absl::Status synced = Sync(f);
    // The open round carries another fragment (the others' phase): join it with that one.
    if (const std::optional<int> open = RoundFragmentOf(synced); open.has_value() && *open != f) {
      synced = Sync(*open);
    }
    if (absl::IsOutOfRange(synced)) return synced;
    if (status.ok()) status = std::move(synced);
  }
  return status;
}

absl::Status LocalSGD::Launch(int fragment) {
  ++syncs_;
  BeforeRound(fragment);
  launched_steps_ = trained_[fragment];
  trained_[fragment] = 0;
  absl::Status status = averager_->Launch(tensors_, fragment, &steps_);
  HoldAtLastStep();
  if (!status.ok()) {  // a launch that ran its round at once (a rank died)
    Took(status);
    trained_[fragment] += launched_steps_;
    AfterRound(fragment, launched_steps_, status);
  }
  synced_at_[fragment] = steps_;
  failed_[fragment] = !status.ok();
  if (status.ok()) {
    launched_at_ = steps_;
    launched_fragment_ = fragment;
  } else {
    ++rounds_completed_;  // nothing in flight: the round ended here
  }
  return status;
}

absl::Status LocalSGD::Sync(int fragment) {
  ++syncs_;
  ++rounds_completed_;
  BeforeRound(fragment);
  const int64_t steps = trained_[fragment];
  const absl::Time syncing = absl::Now();
  absl::Status status = averager_->Average(tensors_, fragment, &steps_);
  waited_ += absl::Now() - syncing;
  HoldAtLastStep();
  Took(status);
  AfterRound(fragment, steps, status);
  synced_at_[fragment] = steps_;
  failed_[fragment] = !status.ok() && !absl::IsOutOfRange(status);
  return status;
}

}  // namespace localsgd
