#ifndef LOCALSGD_WORKER_ROUND_PACE_H_
#define LOCALSGD_WORKER_ROUND_PACE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/localsgd/v1/run_spec.pb.h"

namespace localsgd {

// When a copy of the model ends its training between two of its rounds in a paced run
// (RunSpec.round_seconds; docs/design.md, "Paced rounds"): once it has trained for the round's
// time since its last round began (time waiting for a round to commit does not count: a copy
// that came early and waited moves its next round later, into the others' phase), after at least
// one optimizer step and at most local_sgd_steps / fragments; a window after a round that
// committed without the copy (it came after the grace window) is shorter by the grace window,
// which moves its next round earlier. Or after a number of steps its node's operator fixed (the
// worker's --round_steps), as torchft lets each replica set its own sync_every. Not paced (fixed
// K): every round's steps. Plain value; the caller times.
class RoundPace {
 public:
  RoundPace() = default;  // not paced

  // The pace of `spec` (validated, with defaults); `fixed_steps` > 0 fixes this node's steps.
  // INVALID_ARGUMENT naming round_steps when it is outside the range above, or given for a
  // run that is not paced.
  static absl::StatusOr<RoundPace> Of(const v1::RunSpec& spec, int64_t fixed_steps = 0);

  bool paced() const { return max_steps_ > 0; }
  // Whether the window is over after `steps` optimizer steps and `trained` time in it (since it
  // began, less the time waiting for rounds).
  bool Done(int64_t steps, absl::Duration trained) const;
  // A window begins: the round's time, less the grace window after LeftOut(true).
  void Began();
  // The copy's last round committed without it (a stale round): the window in progress is
  // shorter by the grace window, or the next one when this one is over.
  void LeftOut(bool window_over);

 private:
  RoundPace(const v1::RunSpec& spec, int64_t max_steps, int64_t fixed);

  absl::Duration round_time_;
  absl::Duration grace_;
  int64_t max_steps_ = 0;  // 0: not paced
  int64_t fixed_ = 0;
  bool left_out_ = false;  // the next window is shorter
  absl::Duration window_;  // the window's time
};

}  // namespace localsgd

#endif  // LOCALSGD_WORKER_ROUND_PACE_H_
