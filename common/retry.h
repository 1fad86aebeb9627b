#ifndef LOCALSGD_COMMON_RETRY_H_
#define LOCALSGD_COMMON_RETRY_H_

#include <algorithm>
#include <functional>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace localsgd {

// The one way a member waits on the coordinator or a peer (docs/design.md, "Retries"): which
// failures pass, how long between attempts, and when to give up.

// What passes, in one place. Each wait names the one that fits what it calls.
//
// The coordinator or peer is out of reach (UNAVAILABLE, DEADLINE_EXCEEDED).
bool IsUnreachable(const absl::Status& status);
// A call that may succeed when made again: out of reach, a connection reset mid-call (CANCELLED,
// UNKNOWN, INTERNAL, ABORTED), this member's lease lost while its heartbeat joins again
// (NOT_FOUND naming the member_id field; a run that is not found stays so), or a join that
// replaced the credential this call carried (PERMISSION_DENIED naming member_credential).
bool IsTransientCall(const absl::Status& status);
// A round that failed for a passing reason: out of reach, the round aborted or opened without
// this node (FAILED_PRECONDITION; also "the run is not running", so a run stopped during its
// last round keeps its workers a while), the leader's lease lost while it was cut off
// (NOT_FOUND until its heartbeat joins again) or its credential replaced by that join
// (PERMISSION_DENIED naming member_credential).
bool IsPassingRoundFailure(const absl::Status& status);

struct RetryPolicy {
  // Which failures are tried again (any other ends the wait).
  std::function<bool(const absl::Status&)> transient = IsUnreachable;
  // The pause before the first retry, doubled after each up to max_backoff.
  absl::Duration backoff = absl::Seconds(1);
  absl::Duration max_backoff = absl::Seconds(1);
  // No retry whose pause would end more than this after the first attempt began.
  absl::Duration budget = absl::InfiniteDuration();
  int max_retries = 0;  // 0: no limit
  // The wait ends (with the last outcome) as soon as this is true; checked during the pauses.
  std::function<bool()> stop;
};

// The time source of a wait (a fake one in tests).
struct RetryClock {
  std::function<absl::Time()> now = [] { return absl::Now(); };
  std::function<void(absl::Duration)> sleep = [](absl::Duration d) { absl::SleepFor(d); };
};

namespace retry_internal {

inline const absl::Status& StatusOf(const absl::Status& status) { return status; }
template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& result) {
  return result.status();
}

// Pauses for `pause` in slices of at most 100 ms; false when `stop` came true meanwhile.
bool Pause(absl::Duration pause, const std::function<bool()>& stop, const RetryClock& clock);

}  // namespace retry_internal

// Given `result`, the outcome of a first attempt (an absl::Status or absl::StatusOr): calls
// `attempt` (returning the same type) until the outcome succeeds, fails for a reason
// `policy.transient` does not pass, or the policy gives up (its budget counted from this call);
// before each retry calls `on_retry(status, retry, pause)` (retry counts from 1: e.g. to log).
// Returns the last outcome.
template <typename Result, typename Attempt, typename OnRetry>
Result RetryAfter(const RetryPolicy& policy, Result result, Attempt attempt, OnRetry on_retry,
                  const RetryClock& clock = RetryClock()) {
  const absl::Time give_up = clock.now() + policy.budget;
  absl::Duration pause = policy.backoff;
  for (int retry = 1;; ++retry) {
    const absl::Status& status = retry_internal::StatusOf(result);
    if (status.ok() || !policy.transient(status) || (policy.stop && policy.stop()) ||
        (policy.max_retries > 0 && retry > policy.max_retries) || clock.now() + pause > give_up) {
      return result;
    }
    on_retry(status, retry, pause);
    if (!retry_internal::Pause(pause, policy.stop, clock)) return result;
    pause = std::min(pause * 2, policy.max_backoff);
    result = attempt();
  }
}

// The same with `attempt` making the first attempt too.
template <typename Attempt, typename OnRetry>
auto Retry(const RetryPolicy& policy, Attempt attempt, OnRetry on_retry,
           const RetryClock& clock = RetryClock()) {
  return RetryAfter(policy, attempt(), attempt, std::move(on_retry), clock);
}

template <typename Attempt>
auto Retry(const RetryPolicy& policy, Attempt attempt, const RetryClock& clock = RetryClock()) {
  return Retry(
      policy, std::move(attempt), [](const absl::Status&, int, absl::Duration) {}, clock);
}

}  // namespace localsgd

#endif  // LOCALSGD_COMMON_RETRY_H_
