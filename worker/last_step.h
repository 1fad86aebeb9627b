#ifndef LOCALSGD_WORKER_LAST_STEP_H_
#define LOCALSGD_WORKER_LAST_STEP_H_

#include <cstdint>

#include "absl/status/status.h"
#include "worker/local_sgd.h"
#include "worker/parameter_averager.h"

namespace localsgd {

// A round that failed for a passing reason: the coordinator or a peer unreachable, the round
// aborted or opened without this node (FAILED_PRECONDITION; also "the run is not running",
// so a run stopped during its last round keeps its workers for up to a minute more), or the
// leader's lease ran out while it was cut off (NOT_FOUND until its heartbeat joins again, and
// PERMISSION_DENIED naming member_credential while a sync still carries the credential that
// join replaced).
bool WorthAnotherTry(const absl::Status& status);

// How often the run's last round is tried again, once a second.
inline constexpr int kLastRoundAttempts = 60;

// The run's last optimizer step, right after LocalSGD::Step() there returned `status`
// (`completed_before`: rounds_completed() before that Step()). An overlapped round still in
// flight merges now and every fragment not synced at this step syncs now (also when the step
// is not a multiple of local_sgd_steps: the run's last round), so that the node
// knows how the run's last round went; a last round that failed for a passing reason is tried
// again (LocalSGD::Resync) while the averager stays healthy and the step stays where it is.
// Every rank of a node sees the same outcomes, so all of them try alike. Returns the outcome.
absl::Status SyncLastStep(LocalSGD& local_sgd, const ParameterAverager* averager,
                          int64_t completed_before, absl::Status status);

}  // namespace localsgd

#endif  // LOCALSGD_WORKER_LAST_STEP_H_
