#ifndef LOCALSGD_COORDINATOR_STAR_ROUND_H_
#define LOCALSGD_COORDINATOR_STAR_ROUND_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/round_grace.h"
#include "coordinator/suspensions.h"

namespace localsgd {

// The decisions of one star round (docs/design.md, "Star rounds"), free of gRPC, of the model
// and of any clock of its own: the mirror of ShardedRound. The round manager feeds it events
// (a header, a member's whole delta, a member gone, screening's verdicts, the averaging's
// end) and acts on what it reports (who to drop, commit or abort).
//
// The round expects every node leader that was live when it opened, each in a slot. A member
// is dropped when it leaves (stream ended, lease expired, bad input, header refused), has
// not sent its whole delta by the deadline, or has not arrived by the grace window's end; the
// round goes on without it. It aborts once the
// members left stand for fewer than min_workers workers, or when its update cannot be made
// (Fail). It commits once every chunk is averaged (Averaged) with the quorum held. Members
// screened out (Exclude) stay in the round but not in its mean or its commit.
// Thread-compatible.
class StarRound {
 public:
  struct Candidate {
    std::string member_id;
    int workers = 1;     // ranks it stands for
    bool graced = true;  // the grace window may leave it out (not a leader starting up)
  };
  struct Options {
    int64_t number = 0;
    absl::Time opened;
    absl::Duration deadline = absl::Seconds(60);
    // Members not in by its end are left out, not held at fault (RunSpec.round_grace_seconds).
    RoundGrace grace;
    int min_workers = 1;
  };
  enum class Phase { kOpen, kCommitted, kAborted };
  // A member dropped, as TakeDrops reports it: its slot, why, and the status its stream ends
  // with.
  struct Drop {
    int slot = -1;
    std::string reason;
    absl::Status status;
  };

  StarRound(Options options, std::vector<Candidate> expected);

  // A member's header, standing for `workers` ranks, at `now`: its slot. FAILED_PRECONDITION
  // when it is not expected in this round or was dropped; ALREADY_EXISTS when it came twice;
  // ABORTED once the round is over.
  absl::StatusOr<int> Arrive(const std::string& member_id, int64_t step, int workers,
                             absl::Time now);
  // The member sent its whole delta (at `now`).
  void Delivered(int slot, absl::Time now);
  // The member is out of the round: `reason` for the record, `status` for its stream;
  // `excused`: not held against it in Faults().
  void Leave(int slot, const std::string& reason, const absl::Status& status, bool excused = false);
  // The slot of `member_id`, or -1.
  int SlotOf(const std::string& member_id) const;
  // Screening excluded the member's delta from the mean.
  void Exclude(int slot, const std::string& reason);
  // Every chunk is averaged: the round commits, unless it is over.
  void Averaged();
  // The update cannot be made (it overflows the codec): the round aborts.
  void Fail(const std::string& reason);
  // Drops the members that are no longer live leaders, past the deadline those that have not
  // delivered, and past the grace window's end those that have not arrived.
  void Tick(absl::Time now, const std::vector<std::string>& live_leaders);

  Phase phase() const { return phase_; }
  int64_t number() const { return options_.number; }
  const std::string& abort_reason() const { return abort_reason_; }
  // Members dropped since the last call (the engine stops waiting for them, their streams
  // end).
  std::vector<Drop> TakeDrops() { return std::move(drops_); }

  const std::vector<std::string>& members() const { return members_; }
  bool arrived(int slot) const { return state_[slot].arrived; }
  bool dropped(int slot) const { return state_[slot].dropped; }
  // Members that arrived and were not dropped, in slot order (the round's record).
  std::vector<std::string> Present() const;
  // Members that arrived and are neither dropped nor excluded, in slot order, and the global
  // step their claims give the round (RoundStep, at least `floor`).
  std::vector<std::string> Included() const;
  int64_t Step(int64_t floor, int64_t ceiling = 0) const;
  // Every member dropped (and every one excluded) so far, with its reason, in order.
  const std::vector<std::pair<std::string, std::string>>& dropped() const { return all_drops_; }
  const std::vector<std::pair<std::string, std::string>>& excluded() const { return excluded_; }
  // What the round holds against its members (Suspensions): every drop.
  std::vector<RoundFault> Faults() const;
  // From the first member's delivery to the last one's (0 before two deliveries).
  absl::Duration SlowestWait() const;

 private:
  struct Member {
    int workers = 1;
    bool graced = true;
    bool arrived = false;
    absl::Time arrived_at;
    bool delivered = false;
    bool dropped = false;
    bool excluded = false;
    int64_t step = 0;
  };

  // Aborts when the quorum is lost.
  void CheckQuorum();
  void AbortWith(const std::string& reason);

  Options options_;
  std::vector<std::string> members_;
  std::vector<Member> state_;
  Phase phase_ = Phase::kOpen;
  std::string abort_reason_;
  std::vector<Drop> drops_;
  std::vector<std::pair<std::string, std::string>> all_drops_;
  std::vector<std::string> excused_;  // dropped, not held against them
  std::vector<std::string> silent_;   // dropped at the deadline, alone in not arriving
  std::vector<std::pair<std::string, std::string>> excluded_;
  absl::Time first_delivery_ = absl::InfiniteFuture();
  absl::Time last_delivery_ = absl::InfinitePast();
};

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_STAR_ROUND_H_
