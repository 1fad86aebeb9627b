#include "common/outer_step.h"

#include <cmath>
#include <cstddef>

namespace localsgd {

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

void OuterStepInPlace(const OuterOptimizer& outer, absl::Span<const float> mean,
                      absl::Span<float> global, absl::Span<float> momentum) {
  const size_t n = global.size();
  if (outer.momentum == 0) {
    for (size_t i = 0; i < n; ++i) {
      global[i] = global[i] + OuterUpdate(outer, mean[i], 0.0f, nullptr);
    }
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    global[i] = global[i] + OuterUpdate(outer, mean[i], momentum[i], &momentum[i]);
  }
}

}  // namespace localsgd
