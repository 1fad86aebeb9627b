#include "common/round_schedule.h"

#include "absl/strings/str_cat.h"

namespace localsgd {
namespace {

absl::Status FieldError(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("spec.", field, ": ", why));
}

}  // namespace

absl::StatusOr<RoundSchedule> RoundSchedule::Make(int local_sgd_steps, int overlap_steps,
                                                  int fragments) {
  if (local_sgd_steps < 1 || local_sgd_steps > 1'000'000) {
    return FieldError("local_sgd_steps",
                      absl::StrCat("must be in [1, 1000000], got ", local_sgd_steps));
  }
  if (overlap_steps < 0 || overlap_steps >= local_sgd_steps) {
    return FieldError(
        "overlap_steps",
        absl::StrCat(overlap_steps, " is not in [0, local_sgd_steps = ", local_sgd_steps, ")"));
  }
  if (fragments < 1 || fragments > kMaxFragments) {
    return FieldError("fragments",
                      absl::StrCat("must be in [1, ", kMaxFragments, "], got ", fragments));
  }
  if (local_sgd_steps % fragments != 0) {
    return FieldError(
        "fragments",
        absl::StrCat(fragments, " does not divide local_sgd_steps = ", local_sgd_steps));
  }
  if (const int apart = local_sgd_steps / fragments; overlap_steps >= apart) {
    return FieldError("overlap_steps",
                      absl::StrCat(overlap_steps, " is not below local_sgd_steps / fragments = ",
                                   apart, " (one fragment round in flight at a time)"));
  }
  return RoundSchedule(local_sgd_steps, overlap_steps, fragments);
}

bool RoundSchedule::RoundAt(int64_t step) const {
  return step > 0 && step % (local_sgd_steps_ / fragments_) == 0;
}

int RoundSchedule::FragmentAt(int64_t step) const {
  return static_cast<int>((step % local_sgd_steps_) / (local_sgd_steps_ / fragments_));
}

int64_t RoundSchedule::StepsToPhase(int64_t step, int fragment) const {
  if (fragment < 0 || fragment >= fragments_) return 0;
  const int64_t stride = local_sgd_steps_ / fragments_;
  return stride * ((fragment - FragmentAt(step) + fragments_) % fragments_);
}

}  // namespace localsgd
