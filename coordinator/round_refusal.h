#ifndef LOCALSGD_COORDINATOR_ROUND_REFUSAL_H_
#define LOCALSGD_COORDINATOR_ROUND_REFUSAL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace localsgd {

// What both round protocols (StarRound, ShardedRound) answer a member they cannot take, with
// what the member should do next.

// The round opened without `member_id`: it keeps training and adopts the committed model.
inline absl::Status OpenedWithout(int64_t round, const std::string& member_id) {
  return absl::FailedPreconditionError(
      absl::StrCat("round ", round, " opened without member ", member_id,
                   "; keep training and fetch the model after it commits"));
}

// The round aborted with `reason`: the member keeps its weights until the next boundary.
inline absl::Status RoundAborted(int64_t round, const std::string& reason) {
  return absl::AbortedError(
      absl::StrCat("round ", round, " aborted: ", reason,
                   "; keep your local weights and sync at the next boundary"));
}

// Rounds back off after aborting in a row (RoundBackoff; `why` says until when): the member
// keeps its weights until the next boundary, as for an aborted round.
inline absl::Status RoundsBackOff(const std::string& why) {
  return absl::AbortedError(
      absl::StrCat(why, "; keep your local weights and sync at the next boundary"));
}

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_ROUND_REFUSAL_H_
