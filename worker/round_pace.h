#ifndef LOCALSGD_WORKER_ROUND_PACE_H_
#define LOCALSGD_WORKER_ROUND_PACE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/localsgd/v1/run_spec.pb.h"

namespace localsgd {

// When a copy of the model ends its training between two of its rounds in a paced run
// (RunSpec.round_seconds; docs/design.md, "Paced rounds"): once the round's time has passed
// since its window began (with overlap at its last round's start, so that its rounds follow one
// another at the round's time whatever they cost it; without, at its last round's end, where
// every node's rounds line up), after at least one optimizer step and at most
// local_sgd_steps / fragments; a window after a round that committed without the copy (it came
// after the grace window) is shorter by the grace window, so that it comes back into the
// others' phase. Or after a number of steps its node's operator fixed (the worker's
// --round_steps), as torchft lets each replica set its own sync_every. Not paced (fixed K):
// every round's steps. Plain value; the caller times.
class RoundPace {
 public:
  RoundPace() = default;  // not paced

  // The pace of `spec` (validated, with defaults); `fixed_steps` > 0 fixes this node's steps.
  // INVALID_ARGUMENT naming round_steps when it is outside the range above, or given for a
  // run that is not paced.
  static absl::StatusOr<RoundPace> Of(const v1::RunSpec& spec, int64_t fixed_steps = 0);

  bool paced() const { return max_steps_ > 0; }
  // Rounds overlap training: a window begins at its last round's start, else at its end.
  bool from_round_start() const { return from_round_start_; }
  // Whether the window is over after `steps` optimizer steps in `elapsed` since it began.
  bool Done(int64_t steps, absl::Duration elapsed) const;
  // A window begins: the round's time, less the grace window after LeftOut().
  void Began();
  // The copy's last round committed without it (a stale round).
  void LeftOut() { left_out_ = true; }

 private:
  RoundPace(const v1::RunSpec& spec, int64_t max_steps, int64_t fixed);

  absl::Duration round_time_;
  absl::Duration grace_;
  bool from_round_start_ = false;
  int64_t max_steps_ = 0;  // 0: not paced
  int64_t fixed_ = 0;
  bool left_out_ = false;
  absl::Duration window_;  // the window's time
};

}  // namespace localsgd

#endif  // LOCALSGD_WORKER_ROUND_PACE_H_
