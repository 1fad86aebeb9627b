#ifndef LOCALSGD_COMMON_OUTER_STEP_H_
#define LOCALSGD_COMMON_OUTER_STEP_H_

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace localsgd {

// The outer optimizer applied to the weighted mean of the deltas. lr 1, momentum 0 is plain
// averaging; DiLoCo is lr 0.7, momentum 0.9, nesterov.
struct OuterOptimizer {
  double lr = 1.0;
  double momentum = 0.0;
  bool nesterov = false;
};

// The update of one value from its mean delta, advancing its momentum (ignored without
// momentum). The one formula every copy uses (the star aggregator, and in sharded rounds every
// member and the coordinator), so that all copies of global[r] stay bit-identical.
inline float OuterUpdate(const OuterOptimizer& outer, float mean, float old_momentum,
                         float* new_momentum) {
  const float lr = static_cast<float>(outer.lr);
  if (outer.momentum == 0) return lr * mean;
  const float mu = static_cast<float>(outer.momentum);
  *new_momentum = mu * old_momentum + mean;
  return outer.nesterov ? lr * (mean + mu * *new_momentum) : lr * *new_momentum;
}

// OUT_OF_RANGE when the outer step with `mean` would take a value of `global` past fp32's
// range (finite deltas can still sum too far); touches nothing. `momentum` is empty without
// outer momentum, else global's size.
absl::Status CheckOuterStep(const OuterOptimizer& outer, absl::Span<const float> mean,
                            absl::Span<const float> global, absl::Span<const float> momentum);

// global += update, momentum advanced, for every value (sizes as for CheckOuterStep).
void ApplyOuterStep(const OuterOptimizer& outer, absl::Span<const float> mean,
                    absl::Span<float> global, absl::Span<float> momentum);

// The same step written elsewhere, for a range computed as its mean arrives and installed at
// the commit: `mean_then_next` holds the mean on entry and global + update on return (the very
// value ApplyOuterStep would leave in global); `next_momentum` gets the advanced momentum.
// Returns false when a value is not finite (the update overflows fp32).
bool OuterStepInto(const OuterOptimizer& outer, absl::Span<float> mean_then_next,
                   absl::Span<const float> global, absl::Span<const float> momentum,
                   absl::Span<float> next_momentum);

}  // namespace localsgd

#endif  // LOCALSGD_COMMON_OUTER_STEP_H_
