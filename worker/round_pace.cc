#include "worker/round_pace.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace localsgd {

RoundPace::RoundPace(const v1::RunSpec& spec, int64_t max_steps, int64_t fixed)
    : round_time_(absl::Seconds(spec.round_seconds())),
      grace_(absl::Seconds(spec.round_grace_seconds())),
      max_steps_(max_steps),
      fixed_(fixed),
      window_(round_time_) {}

absl::StatusOr<RoundPace> RoundPace::Of(const v1::RunSpec& spec, int64_t fixed_steps) {
  const bool paced = spec.round_seconds() > 0;
  if (!paced) {
    if (fixed_steps > 0) {
      return absl::InvalidArgumentError(
          "round_steps: the run is not paced (its spec sets no round_seconds); every node "
          "trains local_sgd_steps between rounds");
    }
    return RoundPace();
  }
  const int64_t max_steps = spec.local_sgd_steps() / std::max(1, spec.fragments());
  if (fixed_steps != 0 && (fixed_steps < 1 || fixed_steps > max_steps)) {
    return absl::InvalidArgumentError(
        absl::StrCat("round_steps: must be in [1, local_sgd_steps / fragments = ", max_steps,
                     "] for this run, got ", fixed_steps));
  }
  return RoundPace(spec, max_steps, fixed_steps);
}

bool RoundPace::Done(int64_t steps, absl::Duration trained) const {
  if (!paced()) return false;
  if (fixed_ > 0) return steps >= fixed_;
  return steps >= max_steps_ || (steps >= 1 && trained >= window_);
}

void RoundPace::Began() {
  window_ = left_out_ ? std::max(absl::ZeroDuration(), round_time_ - grace_) : round_time_;
  left_out_ = false;
}

void RoundPace::LeftOut(bool window_over) {
  if (window_over) {
    left_out_ = true;
  } else {
    window_ = std::max(absl::ZeroDuration(), round_time_ - grace_);
  }
}

}  // namespace localsgd
