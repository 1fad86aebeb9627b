#ifndef LOCALSGD_EXCHANGE_CHECKPOINT_CADENCE_H_
#define LOCALSGD_EXCHANGE_CHECKPOINT_CADENCE_H_

#include <cstdint>

#include "absl/time/time.h"

namespace localsgd {

// Which committed rounds a node leader writes as checkpoints (docs/design.md, "Checkpoints"):
// the multiples of a period, so that every node's writes fall in the same rounds (a round waits
// for its slowest member: writes spread over different rounds would slow N times as many). The
// period is every_rounds * 2^k, the least that keeps the writes to `share` of the time: after a
// write that took T, with rounds of R each (measured from the last write, or from Begin, to
// this one's start), the least k with every_rounds * 2^k * R >= T / share. Such periods nest, so
// nodes whose disks differ still write in the same rounds, the faster one's a superset. Share 1:
// every every_rounds-th round, whatever the time. The round a node starts from is not written.
// A pure decision; the caller gives the clock. Thread-compatible.
class CheckpointCadence {
 public:
  // `every_rounds` >= 1, `share` in (0, 1] (RunSpec.checkpoint_every_rounds, checkpoint_share).
  CheckpointCadence(int64_t every_rounds, double share)
      : every_rounds_(every_rounds), share_(share), period_(every_rounds) {}

  // The node starts from round `round` at `now` (call once, before Due).
  void Begin(int64_t round, absl::Time now) {
    last_round_ = round;
    since_ = now;
  }
  // Whether committed round `round` is to be written.
  bool Due(int64_t round) const { return round > last_round_ && round % period_ == 0; }
  // Round `round` was written, from `began` to `ended`.
  void Wrote(int64_t round, absl::Time began, absl::Time ended);
  // The rounds between writes now.
  int64_t period() const { return period_; }

 private:
  const int64_t every_rounds_;
  const double share_;
  int64_t period_;
  int64_t last_round_ = 0;
  absl::Time since_ = absl::InfinitePast();  // when round last_round_ was begun or written
};

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_CHECKPOINT_CADENCE_H_
