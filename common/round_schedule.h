#ifndef LOCALSGD_COMMON_ROUND_SCHEDULE_H_
#define LOCALSGD_COMMON_ROUND_SCHEDULE_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace localsgd {

// RunSpec.fragments at most.
inline constexpr int kMaxFragments = 64;

// When a copy of the model syncs (docs/design.md, "Overlapped rounds", "Streaming fragments"):
// the run spec's local_sgd_steps K, overlap_steps tau and fragments P, checked once where a
// member learns the spec and never corrected. A round falls every K / P optimizer steps and
// carries one fragment; an overlapped round merges tau steps after it launched. Plain value.
class RoundSchedule {
 public:
  RoundSchedule() = default;  // a round every step, of the whole model, not overlapped

  // INVALID_ARGUMENT naming the spec's field: K outside [1, 1000000], tau outside [0, K / P),
  // P outside [1, kMaxFragments] or not dividing K.
  static absl::StatusOr<RoundSchedule> Make(int local_sgd_steps, int overlap_steps = 0,
                                            int fragments = 1);

  int local_sgd_steps() const { return local_sgd_steps_; }
  int overlap_steps() const { return overlap_steps_; }
  int fragments() const { return fragments_; }

  // Whether a round falls at optimizer step `step`: every K / P steps.
  bool RoundAt(int64_t step) const;
  // The fragment whose round falls at `step` (RoundAt): fragment f syncs at the steps s with
  // s - f K / P a multiple of K.
  int FragmentAt(int64_t step) const;
  // The steps, a multiple of K / P below K, that move the round at `step` into the phase where
  // it carries `fragment` (0 for a fragment out of range): a member whose rounds carry other
  // fragments than the others' moves its step by this much.
  int64_t StepsToPhase(int64_t step, int fragment) const;

 private:
  RoundSchedule(int local_sgd_steps, int overlap_steps, int fragments)
      : local_sgd_steps_(local_sgd_steps), overlap_steps_(overlap_steps), fragments_(fragments) {}

  int local_sgd_steps_ = 1;
  int overlap_steps_ = 0;
  int fragments_ = 1;
};

}  // namespace localsgd

#endif  // LOCALSGD_COMMON_ROUND_SCHEDULE_H_
