#ifndef LOCALSGD_COORDINATOR_MEMBER_STANDING_H_
#define LOCALSGD_COORDINATOR_MEMBER_STANDING_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "coordinator/suspensions.h"
#include "proto/localsgd/v1/coordinator.pb.h"

namespace localsgd {

// What the rounds of one run hold against its members (docs/design.md, "Faults"): which
// process each member is (the credential of its latest Sync header), whom the rounds heard
// from, who sits rounds out (Suspensions, under the run's spec), and the refusals made before
// the next round opened. A pure decision over the calls and a clock the caller passes in;
// a new run starts a new one. Thread-compatible.
class MemberStanding {
 public:
  explicit MemberStanding(const v1::RunSpec& spec = v1::RunSpec());

  // `member_id` sent a Sync header carrying `credential`. Another credential than its last is
  // a new process: the earlier one's failures and silence are forgotten.
  void Heard(const std::string& member_id, const std::string& credential);
  // Whether `member_id` sits rounds out at `now` (why, for how long: `*why` when not null).
  bool Suspended(const std::string& member_id, absl::Time now, std::string* why = nullptr) const {
    return suspensions_.Suspended(member_id, now, why);
  }
  // Members whose suspension ended by `now`, each once.
  std::vector<std::string> TakeReadmitted(absl::Time now) {
    return suspensions_.TakeReadmitted(now);
  }
  // Whether the member sent a Sync header in this run under its current credential (a leader
  // that has not may still be starting up).
  bool HeardInRun(const std::string& member_id) const { return heard_in_run_.count(member_id) > 0; }
  // A live leader was refused before round `round` opened: it is out of that round.
  void RefuseBefore(const std::string& member_id, int64_t round, std::string reason);
  // The refusals for round `round` (member id, reason); every refusal is forgotten.
  std::vector<std::pair<std::string, std::string>> TakeRefusals(int64_t round);
  // A round ended at `now` with `committed` in its commit (none: it aborted) and `faults`
  // found: returns the members suspended now. A fault is silent only for a member heard
  // earlier in the run (its first round may find it starting up) and not since the last
  // commit (one told it is stale comes back at its next boundary).
  std::vector<Suspensions::Verdict> RoundEnded(absl::Time now,
                                               const std::vector<std::string>& committed,
                                               std::vector<RoundFault> faults);

 private:
  Suspensions suspensions_;
  std::set<std::string> heard_in_run_;
  std::set<std::string> heard_since_commit_;
  std::map<std::string, std::string> credentials_;
  std::map<std::string, std::pair<int64_t, std::string>> refused_;  // id -> (round, reason)
};

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_MEMBER_STANDING_H_
