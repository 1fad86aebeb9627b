#include "worker/local_sgd.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace localsgd {

LocalSGD::LocalSGD(ParameterAverager* averager, std::vector<at::Tensor> tensors,
                   int local_sgd_steps, bool enabled, int64_t first_step)
    : averager_(averager),
      tensors_(std::move(tensors)),
      local_sgd_steps_(local_sgd_steps < 1 ? 1 : local_sgd_steps),
      enabled_(enabled),
      steps_(first_step),
      synced_at_(first_step) {}

LocalSGD::~LocalSGD() {
  absl::Status status = Finish();
  if (!status.ok()) LogWarning(absl::StrCat("LocalSGD: last sync failed: ", status.ToString()));
}

absl::Status LocalSGD::Step() {
  ++steps_;
  if (!enabled_ || steps_ % local_sgd_steps_ != 0) return absl::OkStatus();
  return Sync();
}

absl::Status LocalSGD::Finish() {
  if (finished_) return absl::OkStatus();
  finished_ = true;
  if (!enabled_ || steps_ == synced_at_) return absl::OkStatus();
  return Sync();
}

absl::Status LocalSGD::Sync() {
  ++syncs_;
  absl::Status status = averager_->Average(tensors_, &steps_);
  synced_at_ = steps_;
  return status;
}

}  // namespace localsgd
