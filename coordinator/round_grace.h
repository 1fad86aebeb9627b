#ifndef LOCALSGD_COORDINATOR_ROUND_GRACE_H_
#define LOCALSGD_COORDINATOR_ROUND_GRACE_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "proto/localsgd/v1/run_spec.pb.h"

namespace localsgd {

// How long a round waits for members that have not arrived (RunSpec.round_grace_seconds and
// round_quorum_fraction; docs/design.md, "Paced rounds"): once a quorum of the members it
// expects have arrived, the others have the grace window more; then the round goes on without
// them. A pure decision: the round holds the arrival times and asks. Plain value.
class RoundGrace {
 public:
  RoundGrace() = default;  // no grace window: members have until the round's deadline
  RoundGrace(absl::Duration grace, double quorum_fraction)
      : grace_(grace), quorum_fraction_(quorum_fraction) {}
  // The run spec's (a validated spec with defaults).
  static RoundGrace Of(const v1::RunSpec& spec);

  // The members that make the quorum of a round expecting `expected`: at least one.
  int Quorum(int expected) const;
  // When the round stops waiting for members that have not arrived, given the arrival times
  // so far (any order) of a round expecting `expected`: the quorum's last arrival plus the
  // grace window; InfiniteFuture without a grace window or before the quorum is in.
  absl::Time Ends(std::vector<absl::Time> arrivals, int expected) const;
  // Why a member was left out at Ends, for the round's record.
  std::string Reason(int expected) const;

 private:
  absl::Duration grace_ = absl::ZeroDuration();
  double quorum_fraction_ = 0.5;
};

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_ROUND_GRACE_H_
