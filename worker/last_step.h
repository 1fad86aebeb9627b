#ifndef LOCALSGD_WORKER_LAST_STEP_H_
#define LOCALSGD_WORKER_LAST_STEP_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "common/retry.h"
#include "worker/local_sgd.h"
#include "worker/parameter_averager.h"

namespace localsgd {

// How the run's last round is tried again: once a second, 60 times, while it fails for a
// passing reason (IsPassingRoundFailure) and `stop()` is false.
RetryPolicy LastRoundRetry(std::function<bool()> stop);

// The run's last optimizer step, right after LocalSGD::Step() there returned `status`
// (`completed_before`: rounds_completed() before that Step()). An overlapped round still in
// flight merges now and every fragment not synced at this step syncs now (also when the step
// is not a multiple of local_sgd_steps: the run's last round), so that the node
// knows how the run's last round went; a last round that failed for a passing reason is tried
// again (LocalSGD::Resync, LastRoundRetry) while the averager stays healthy and the step stays
// where it is.
// Every rank of a node sees the same outcomes, so all of them try alike. Returns the outcome.
absl::Status SyncLastStep(LocalSGD& local_sgd, const ParameterAverager* averager,
                          int64_t completed_before, absl::Status status);

}  // namespace localsgd

#endif  // LOCALSGD_WORKER_LAST_STEP_H_
