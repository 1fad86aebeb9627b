#include "worker/local_sgd.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace localsgd {

LocalSGD::LocalSGD(ParameterAverager* averager, std::vector<at::Tensor> tensors,
                   int local_sgd_steps, bool enabled, int64_t first_step, int overlap_steps)
    : averager_(averager),
      tensors_(std::move(tensors)),
      local_sgd_steps_(local_sgd_steps < 1 ? 1 : local_sgd_steps),
      enabled_(enabled),
      overlap_steps_(std::clamp(overlap_steps, 0, local_sgd_steps_ - 1)),
      steps_(first_step),
      synced_at_(first_step) {}

LocalSGD::~LocalSGD() {
  absl::Status status = Finish();
  if (!status.ok()) LogWarning(absl::StrCat("LocalSGD: last sync failed: ", status.ToString()));
}

absl::Status LocalSGD::Step() {
  ++steps_;
  if (!enabled_) return absl::OkStatus();
  absl::Status merged;
  if (round_in_flight() && steps_ >= launched_at_ + overlap_steps_) merged = MergeNow();
  if (steps_ % local_sgd_steps_ != 0) return merged;
  return overlap_steps_ == 0 ? Sync() : Launch();
}

absl::Status LocalSGD::MergeNow() {
  if (!round_in_flight()) return absl::OkStatus();
  launched_at_ = -1;
  ++rounds_completed_;
  return averager_->Merge(tensors_, &steps_);
}

absl::Status LocalSGD::Finish() {
  if (finished_) return absl::OkStatus();
  finished_ = true;
  if (!enabled_) return absl::OkStatus();
  absl::Status merged = MergeNow();
  if (steps_ == synced_at_) return merged;
  return Sync();
}

absl::Status LocalSGD::Launch() {
  ++syncs_;
  absl::Status status = averager_->Launch(tensors_, &steps_);
  synced_at_ = steps_;
  if (status.ok()) {
    launched_at_ = steps_;
  } else {
    ++rounds_completed_;  // nothing in flight: the round ended here
  }
  return status;
}

absl::Status LocalSGD::Sync() {
  ++syncs_;
  ++rounds_completed_;
  absl::Status status = averager_->Average(tensors_, &steps_);
  synced_at_ = steps_;
  return status;
}

}  // namespace localsgd
