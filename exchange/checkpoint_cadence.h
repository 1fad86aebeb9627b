#ifndef LOCALSGD_EXCHANGE_CHECKPOINT_CADENCE_H_
#define LOCALSGD_EXCHANGE_CHECKPOINT_CADENCE_H_

#include <cstdint>

#include "absl/time/time.h"

namespace localsgd {

// When a node leader writes its next checkpoint (docs/design.md, "Checkpoints"): a committed
// round is written once at least `every_rounds` rounds passed since the last one written (or
// since the round the node started from: that model is the initial one, or one it took from
// the others or a checkpoint) and the writes so far took at most `share` of the time: after a
// write that took T, the next begins no sooner than T (1 / share - 1) after it ended. A pure
// decision; the caller gives the clock. Thread-compatible.
class CheckpointCadence {
 public:
  // `every_rounds` >= 1, `share` in (0, 1] (RunSpec.checkpoint_every_rounds, checkpoint_share).
  CheckpointCadence(int64_t every_rounds, double share)
      : every_rounds_(every_rounds), share_(share) {}

  // The node starts from round `round` (call once, before Due): rounds count from there.
  void Begin(int64_t round) { last_round_ = round; }
  // Whether round `round`, committed, is to be written at `now`.
  bool Due(int64_t round, absl::Time now) const {
    return round - last_round_ >= every_rounds_ && now >= next_allowed_;
  }
  // Round `round` was written, from `began` to `ended`.
  void Wrote(int64_t round, absl::Time began, absl::Time ended) {
    last_round_ = round;
    next_allowed_ = ended + (ended - began) * (1 / share_ - 1);
  }
  // When the next write may begin (InfinitePast before the first).
  absl::Time next_allowed() const { return next_allowed_; }

 private:
  const int64_t every_rounds_;
  const double share_;
  int64_t last_round_ = 0;
  absl::Time next_allowed_ = absl::InfinitePast();
};

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_CHECKPOINT_CADENCE_H_
