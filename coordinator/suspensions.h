#ifndef LOCALSGD_COORDINATOR_SUSPENSIONS_H_
#define LOCALSGD_COORDINATOR_SUSPENSIONS_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace localsgd {

// A member's part in a round that went wrong, as the round's decisions saw it: dropped (did not
// arrive or deliver by the deadline, left, bad input) or blamed for an abort (an owner whose
// range was late or unusable). `reported_by` names the member whose claim it is (an owner it
// could not reach), empty when the coordinator saw it itself.
struct RoundFault {
  std::string member_id;
  std::string reason;
  std::string reported_by;
  // It never arrived while every other member did (the round waited its whole deadline for
  // it alone): one such round suspends it.
  bool silent = false;
};

// Which members sit out rounds because they failed earlier ones (docs/design.md, "Faults"):
// a pure decision over round outcomes and a clock the caller passes in.
//
// A member is suspended after `strikes` rounds in a row that it failed with no round it was
// committed in between (after one, when it was silent in it: RoundFault::silent), for `first`,
// doubling with each suspension up to `longest`. Its suspension over, it is readmitted on
// probation: the next round it fails suspends it again at once (for the doubled time); a round
// committed with it clears its record. A claim by one member against another (an unreachable owner)
// strikes the owner, unless the claimant has named two or more different owners since it was last
// committed with: then the claimant is the one at fault, and is struck instead. Thread-compatible.
class Suspensions {
 public:
  struct Options {
    int strikes = 3;  // 0: never suspend
    absl::Duration first = absl::Seconds(30);
    absl::Duration longest = absl::Minutes(10);
  };
  // A member suspended by RoundEnded.
  struct Verdict {
    std::string member_id;
    absl::Duration length;
    int failed_rounds = 0;  // in a row, this one included
    std::string reason;     // the last failure's
  };

  explicit Suspensions(Options options) : options_(options) {}

  // A round ended at `now`: `committed` are the members in its commit (none when it aborted),
  // `faults` what it found. Returns the members suspended now.
  std::vector<Verdict> RoundEnded(absl::Time now, const std::vector<std::string>& committed,
                                  const std::vector<RoundFault>& faults);
  // Whether `member_id` sits out rounds at `now`; when it does, `*why` says for how long and
  // why (when not null).
  bool Suspended(const std::string& member_id, absl::Time now, std::string* why = nullptr) const;
  // Forgets `member_id`'s record (a new process in its place: its failures were the old one's).
  void Forget(const std::string& member_id) { records_.erase(member_id); }
  // Members whose suspension ended by `now`, each reported once.
  std::vector<std::string> TakeReadmitted(absl::Time now);

 private:
  struct Record {
    int strikes = 0;
    int suspensions = 0;  // so far: the next one lasts first * 2^suspensions
    bool probation = false;
    bool announced = true;  // the end of its last suspension was reported
    absl::Time until = absl::InfinitePast();
    std::string reason;
    std::set<std::string> owners_named;  // unreachable owners it reported
  };

  Options options_;
  std::map<std::string, Record> records_;
};

// The event texts of a suspension and of a readmission.
std::string Describe(const Suspensions::Verdict& verdict);
std::string Readmitted(const std::string& member_id);

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_SUSPENSIONS_H_
