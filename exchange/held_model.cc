#include "exchange/held_model.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace localsgd {

void HeldModel::Install(std::string run_id, int64_t round, int64_t global_step,
                        std::vector<float> values, std::vector<float> momentum) {
  MutexLock lock(&mu_);
  run_id_ = std::move(run_id);
  round_ = round;
  global_step_ = global_step;
  values_ = std::move(values);
  momentum_ = std::move(momentum);
}

void HeldModel::Commit(int64_t round, int64_t global_step, absl::FunctionRef<void()> apply) {
  MutexLock lock(&mu_);
  apply();
  round_ = round;
  global_step_ = global_step;
}

absl::Status HeldModel::CheckLocked(const std::string& run_id, int64_t round) const {
  if (values_.empty()) return absl::FailedPreconditionError("this node leader holds no model");
  if (run_id != run_id_ || round != round_) {
    return absl::FailedPreconditionError(absl::StrCat("this node leader holds round ", round_,
                                                      " of run ", run_id_, ", not round ", round,
                                                      " of run ", run_id));
  }
  return absl::OkStatus();
}

absl::StatusOr<HeldModel::Label> HeldModel::Check(const std::string& run_id, int64_t round) const {
  MutexLock lock(&mu_);
  if (absl::Status s = CheckLocked(run_id, round); !s.ok()) return s;
  return Label{run_id_, round_, global_step_, static_cast<int64_t>(values_.size()),
               !momentum_.empty()};
}

absl::Status HeldModel::Read(const std::string& run_id, int64_t round, bool momentum, int64_t begin,
                             int64_t count, std::string* out) const {
  MutexLock lock(&mu_);
  if (absl::Status s = CheckLocked(run_id, round); !s.ok()) return s;
  const std::vector<float>& from = momentum ? momentum_ : values_;
  if (begin < 0 || count < 0 || begin + count > static_cast<int64_t>(from.size())) {
    return absl::InvalidArgumentError(absl::StrCat("values [", begin, ", ", begin + count,
                                                   ") are not in a model of ", from.size()));
  }
  out->assign(reinterpret_cast<const char*>(from.data() + begin),
              static_cast<size_t>(count) * sizeof(float));
  return absl::OkStatus();
}

}  // namespace localsgd
