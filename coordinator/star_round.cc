#include "coordinator/star_round.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "coordinator/round_refusal.h"
#include "coordinator/round_step.h"

namespace localsgd {

StarRound::StarRound(Options options, std::vector<Candidate> expected)
    : options_(std::move(options)) {
  for (Candidate& candidate : expected) {
    members_.push_back(std::move(candidate.member_id));
    state_.push_back(Member{candidate.workers});
    state_.back().graced = candidate.graced;
  }
  CheckQuorum();  // a round without enough leaders aborts at once
}

int StarRound::SlotOf(const std::string& member_id) const {
  auto it = std::find(members_.begin(), members_.end(), member_id);
  return it == members_.end() ? -1 : static_cast<int>(it - members_.begin());
}

absl::StatusOr<int> StarRound::Arrive(const std::string& member_id, int64_t step, int workers,
                                      absl::Time now) {
  const int slot = SlotOf(member_id);
  if (slot < 0) return OpenedWithout(options_.number, member_id);
  if (phase_ == Phase::kAborted) return RoundAborted(options_.number, abort_reason_);
  Member& member = state_[slot];
  if (member.dropped) {
    return absl::FailedPreconditionError(
        absl::StrCat("member ", member_id, " was dropped from round ", options_.number));
  }
  if (member.arrived) {
    return absl::AlreadyExistsError(
        absl::StrCat("member ", member_id, " is already in round ", options_.number));
  }
  member.arrived = true;
  member.arrived_at = now;
  member.step = step;
  member.workers = workers;
  CheckQuorum();
  return slot;
}

void StarRound::Delivered(int slot, absl::Time now) {
  Member& member = state_[slot];
  if (member.delivered || member.dropped) return;
  member.delivered = true;
  first_delivery_ = std::min(first_delivery_, now);
  last_delivery_ = std::max(last_delivery_, now);
}

void StarRound::Leave(int slot, const std::string& reason, const absl::Status& status,
                      bool excused) {
  Member& member = state_[slot];
  if (member.dropped || phase_ != Phase::kOpen) return;
  if (excused) excused_.push_back(members_[slot]);
  member.dropped = true;
  drops_.push_back(Drop{slot, reason, status});
  all_drops_.emplace_back(members_[slot], reason);
  CheckQuorum();
}

void StarRound::Exclude(int slot, const std::string& reason) {
  Member& member = state_[slot];
  if (member.excluded) return;
  member.excluded = true;
  excluded_.emplace_back(members_[slot], reason);
}

void StarRound::Averaged() {
  if (phase_ == Phase::kOpen) phase_ = Phase::kCommitted;
}

void StarRound::Fail(const std::string& reason) {
  if (phase_ == Phase::kOpen) AbortWith(reason);
}

void StarRound::Tick(absl::Time now, const std::vector<std::string>& live_leaders) {
  int missing = 0;
  std::vector<absl::Time> arrivals;
  for (const Member& member : state_) {
    missing += !member.arrived && !member.dropped;
    if (member.arrived) arrivals.push_back(member.arrived_at);
  }
  const int expected = static_cast<int>(members_.size());
  const bool grace_over = now > options_.grace.Ends(std::move(arrivals), expected);
  for (size_t slot = 0; slot < members_.size() && phase_ == Phase::kOpen; ++slot) {
    const Member& member = state_[slot];
    if (member.dropped) continue;
    const int s = static_cast<int>(slot);
    if (std::find(live_leaders.begin(), live_leaders.end(), members_[slot]) == live_leaders.end()) {
      Leave(s, "lease expired or left", absl::UnavailableError("no longer a live member"));
    } else if (now > options_.opened + options_.deadline && !member.delivered) {
      if (!member.arrived && missing == 1) silent_.push_back(members_[slot]);
      Leave(s,
            absl::StrCat("missed the round deadline (", absl::ToDoubleSeconds(options_.deadline),
                         " s)"),
            absl::DeadlineExceededError("missed the round deadline"));
    } else if (grace_over && !member.arrived && member.graced) {
      // Late, not faulty: the grace window is what a run with nodes of unequal speed asks for.
      Leave(s, options_.grace.Reason(expected),
            absl::FailedPreconditionError("did not arrive within the round's grace window"),
            /*excused=*/true);
    }
  }
}

std::vector<RoundFault> StarRound::Faults() const {
  std::vector<RoundFault> faults;
  for (const auto& [id, reason] : all_drops_) {
    if (std::find(excused_.begin(), excused_.end(), id) != excused_.end()) continue;
    faults.push_back(
        RoundFault{id, reason, "", std::find(silent_.begin(), silent_.end(), id) != silent_.end()});
  }
  return faults;
}

std::vector<std::string> StarRound::Included() const {
  std::vector<std::string> included;
  for (size_t slot = 0; slot < members_.size(); ++slot) {
    const Member& member = state_[slot];
    if (member.arrived && !member.dropped && !member.excluded) included.push_back(members_[slot]);
  }
  return included;
}

std::vector<std::string> StarRound::Present() const {
  std::vector<std::string> present;
  for (size_t slot = 0; slot < members_.size(); ++slot) {
    if (state_[slot].arrived && !state_[slot].dropped) present.push_back(members_[slot]);
  }
  return present;
}

int64_t StarRound::Step(int64_t floor, int64_t ceiling) const {
  std::vector<int64_t> claims;
  for (const Member& member : state_) {
    if (member.arrived && !member.dropped && !member.excluded) claims.push_back(member.step);
  }
  return RoundStep(std::move(claims), floor, ceiling);
}

absl::Duration StarRound::SlowestWait() const {
  if (last_delivery_ <= first_delivery_) return absl::ZeroDuration();
  return last_delivery_ - first_delivery_;
}

void StarRound::CheckQuorum() {
  if (phase_ != Phase::kOpen) return;
  int workers = 0;
  for (const Member& member : state_) {
    if (!member.dropped) workers += member.workers;
  }
  if (workers < options_.min_workers) {
    AbortWith(
        absl::StrCat("quorum lost: ", workers, " of min_workers ", options_.min_workers, " left"));
  }
}

void StarRound::AbortWith(const std::string& reason) {
  phase_ = Phase::kAborted;
  abort_reason_ = reason;
}

}  // namespace localsgd
