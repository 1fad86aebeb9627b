#ifndef LOCALSGD_EXCHANGE_OUTER_STEP_H_
#define LOCALSGD_EXCHANGE_OUTER_STEP_H_

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

// One outer step for a range, computed as its mean arrives and installed at the commit:
// `mean_then_next` holds the mean on entry and global + update on return; `next_momentum`
// gets the advanced momentum (`momentum` and `next_momentum` are empty without outer
// momentum). Returns false when a value is not finite (the update overflows fp32). Every span
// but the empty momenta has `global`'s length (the process stops otherwise).
bool OuterStepInto(const OuterOptimizer& outer, absl::Span<float> mean_then_next,
                   absl::Span<const float> global, absl::Span<const float> momentum,
                   absl::Span<float> next_momentum);

// The same step in place, as a member installs a committed round: global += update(mean) and
// `momentum` advanced (empty without outer momentum); bit-identical to OuterStepInto. The same
// lengths as there.
void OuterStepInPlace(const OuterOptimizer& outer, absl::Span<const float> mean,
                      absl::Span<float> global, absl::Span<float> momentum);

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_OUTER_STEP_H_
