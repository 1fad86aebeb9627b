#ifndef LOCALSGD_WORKER_ROUND_PACE_H_
#define LOCALSGD_WORKER_ROUND_PACE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/localsgd/v1/run_spec.pb.h"

namespace localsgd {

// How many optimizer steps a copy of the model trains between two of its rounds in a paced run
// (RunSpec.round_seconds; docs/design.md, "Paced rounds"): as many as fit the round's time at
// the speed it measured over its last round's training (the time spent in rounds left out), in
// [1, local_sgd_steps / fragments], the most before it has timed a round; or a
// number its node's operator fixed (the worker's --round_steps), as torchft lets each replica
// set its own sync_every. Not paced (fixed K): every round's steps. Plain value; the caller
// times.
class RoundPace {
 public:
  RoundPace() = default;  // not paced

  // The pace of `spec` (validated, with defaults); `fixed_steps` > 0 fixes this node's steps.
  // INVALID_ARGUMENT naming round_steps when it is outside the range above, or given for a
  // run that is not paced.
  static absl::StatusOr<RoundPace> Of(const v1::RunSpec& spec, int64_t fixed_steps = 0);

  bool paced() const { return max_steps_ > 0; }
  // The optimizer steps to train before the next round (paced runs).
  int64_t steps() const { return steps_; }
  // The copy trained `steps` optimizer steps in `training` since its last round: the next
  // round's steps follow its speed (unless fixed).
  void Trained(int64_t steps, absl::Duration training);

 private:
  RoundPace(absl::Duration round_time, int64_t max_steps, int64_t fixed);

  absl::Duration round_time_;
  int64_t max_steps_ = 0;  // 0: not paced
  bool fixed_ = false;
  int64_t steps_ = 0;
};

}  // namespace localsgd

#endif  // LOCALSGD_WORKER_ROUND_PACE_H_
