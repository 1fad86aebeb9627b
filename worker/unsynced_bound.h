#ifndef LOCALSGD_WORKER_UNSYNCED_BOUND_H_
#define LOCALSGD_WORKER_UNSYNCED_BOUND_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "worker/local_sgd.h"
#include "worker/parameter_averager.h"

namespace localsgd {

// The bound on training alone (RunSpec.max_unsynced_steps; docs/design.md, "Faults").
struct UnsyncedBound {
  int64_t max_unsynced_steps = 0;  // 0: no bound
  absl::Duration retry_every = absl::Seconds(1);
  std::function<bool()> stop;  // the worker is stopping: wait no longer
  // A wait begins at `step` (to report it).
  std::function<void(int64_t step, int64_t unsynced_steps)> on_wait;
};

// Right after LocalSGD::Step() returned `status` (`completed_before`: rounds_completed()
// before it): when that Step ended a round this copy did not take (LocalSGD::unsynced_steps)
// and the copy has trained max_unsynced_steps or more since the last round it took, the node
// waits for a round instead of training on alone: the round is tried again
// (LocalSGD::Resync: a round of another fragment open is joined with that fragment) every
// retry_every while it fails for a passing reason (IsPassingRoundFailure), the averager stays
// healthy and stop() is false. Every rank of a node sees the same outcomes,
// so all of them wait alike. Returns the last outcome.
absl::Status WaitWithinBound(LocalSGD& local_sgd, const ParameterAverager* averager,
                             const UnsyncedBound& bound, int64_t completed_before,
                             absl::Status status);

}  // namespace localsgd

#endif  // LOCALSGD_WORKER_UNSYNCED_BOUND_H_
