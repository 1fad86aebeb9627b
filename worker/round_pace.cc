#include "worker/round_pace.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace localsgd {

RoundPace::RoundPace(absl::Duration round_time, int64_t max_steps, int64_t fixed)
    : round_time_(round_time),
      max_steps_(max_steps),
      fixed_(fixed > 0),
      steps_(fixed > 0 ? fixed : max_steps) {}

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
  return RoundPace(absl::Seconds(spec.round_seconds()), max_steps, fixed_steps);
}

void RoundPace::Trained(int64_t steps, absl::Duration training) {
  if (!paced() || fixed_ || steps <= 0) return;
  if (training <= absl::ZeroDuration()) {
    steps_ = max_steps_;
    return;
  }
  const double fit = std::floor(absl::FDivDuration(round_time_, training / steps));
  steps_ = static_cast<int64_t>(std::clamp(fit, 1.0, static_cast<double>(max_steps_)));
}

}  // namespace localsgd
