#include "common/outer_step.h"

#include <cmath>
#include <cstddef>

#include "absl/strings/str_cat.h"

namespace localsgd {

absl::Status CheckOuterStep(const OuterOptimizer& outer, absl::Span<const float> mean,
                            absl::Span<const float> global, absl::Span<const float> momentum) {
  if (mean.size() != global.size() || (outer.momentum != 0 && momentum.size() != global.size())) {
    return absl::InvalidArgumentError("outer step: mean, global and momentum differ in size");
  }
  float unused = 0;
  for (size_t i = 0; i < global.size(); ++i) {
    const float m = outer.momentum != 0 ? momentum[i] : 0.0f;
    if (!std::isfinite(global[i] + OuterUpdate(outer, mean[i], m, &unused))) {
      return absl::OutOfRangeError(absl::StrCat(
          "the update of value ", i, " overflows fp32 (the members' deltas are too large)"));
    }
  }
  return absl::OkStatus();
}

void ApplyOuterStep(const OuterOptimizer& outer, absl::Span<const float> mean,
                    absl::Span<float> global, absl::Span<float> momentum) {
  const size_t n = global.size();
  if (outer.momentum == 0) {
    for (size_t i = 0; i < n; ++i) global[i] += OuterUpdate(outer, mean[i], 0.0f, nullptr);
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    float next = 0;
    global[i] += OuterUpdate(outer, mean[i], momentum[i], &next);
    momentum[i] = next;
  }
}

bool OuterStepInto(const OuterOptimizer& outer, absl::Span<float> mean_then_next,
                   absl::Span<const float> global, absl::Span<const float> momentum,
                   absl::Span<float> next_momentum) {
  const size_t n = global.size();
  bool finite = true;
  if (outer.momentum == 0) {
    for (size_t i = 0; i < n; ++i) {
      mean_then_next[i] = global[i] + OuterUpdate(outer, mean_then_next[i], 0.0f, nullptr);
      finite &= std::isfinite(mean_then_next[i]);
    }
    return finite;
  }
  for (size_t i = 0; i < n; ++i) {
    mean_then_next[i] =
        global[i] + OuterUpdate(outer, mean_then_next[i], momentum[i], &next_momentum[i]);
    finite &= std::isfinite(mean_then_next[i]);
  }
  return finite;
}

}  // namespace localsgd
