#include "coordinator/sharded_round.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/digest_vote.h"
#include "coordinator/round_refusal.h"
#include "coordinator/round_step.h"

namespace localsgd {

ShardedRound::ShardedRound(Options options, std::vector<Candidate> expected)
    : options_(std::move(options)) {
  for (Candidate& candidate : expected) expected_.push_back(Member{std::move(candidate)});
  Advance(options_.opened);  // an empty or too small round aborts at once
}

ShardedRound::Member* ShardedRound::Find(const std::string& member_id) {
  for (Member& member : expected_) {
    if (member.candidate.member_id == member_id) return &member;
  }
  return nullptr;
}

absl::Status ShardedRound::Arrive(const std::string& member_id, double weight, int64_t step,
                                  absl::Time now) {
  Member* member = Find(member_id);
  if (member == nullptr) return OpenedWithout(options_.number, member_id);
  if (phase_ == Phase::kAborted) return RoundAborted(options_.number, abort_reason_);
  if (phase_ != Phase::kGathering) {
    return absl::FailedPreconditionError(absl::StrCat(
        "round ", options_.number, " was laid out without member ", member_id,
        " (it came after the deadline); keep training and fetch the model after it commits"));
  }
  if (member->dropped) {
    return absl::FailedPreconditionError(
        absl::StrCat("member ", member_id, " was dropped from round ", options_.number));
  }
  if (member->arrived) {
    return absl::AlreadyExistsError(
        absl::StrCat("member ", member_id, " is already in round ", options_.number));
  }
  member->arrived = true;
  member->arrived_at = now;
  member->weight = weight;
  member->step = step;
  Advance(now);
  return absl::OkStatus();
}

void ShardedRound::Leave(const std::string& member_id, const std::string& reason, absl::Time now,
                         bool excused) {
  Member* member = Find(member_id);
  if (member == nullptr || member->dropped) return;
  if (excused) excused_.push_back(member_id);
  // An owner that leaves while a member still waits for its range's means takes the range
  // with it.
  if (phase_ == Phase::kExchanging && Owns(member->slot) && Waiting(member_id)) {
    Drop(*member, reason);
    AbortWith(absl::StrCat("owner ", member_id, " left before every member held its range (",
                           reason, ")"));
    return;
  }
  Drop(*member, reason);
  Advance(now);
}

void ShardedRound::Drop(Member& member, const std::string& reason) {
  member.dropped = true;
  drops_.emplace_back(member.candidate.member_id, reason);
  all_drops_.emplace_back(member.candidate.member_id, reason);
}

absl::Status ShardedRound::Unreachable(const std::string& member_id, const std::string& owner_id,
                                       const std::string& reason) {
  if (phase_ != Phase::kExchanging) {
    return absl::FailedPreconditionError(
        absl::StrCat("round ", options_.number, " is not exchanging"));
  }
  if (std::none_of(shards_.begin(), shards_.end(),
                   [&](const Shard& shard) { return shard.owner_id == owner_id; })) {
    return absl::InvalidArgumentError(
        absl::StrCat("unreachable.owner_id: ", owner_id, " owns no range in this round"));
  }
  blamed_.push_back(RoundFault{owner_id, reason.substr(0, 300), member_id});
  AbortWith(absl::StrCat(member_id, " could not exchange with owner ", owner_id, ": ",
                         reason.substr(0, 300)));
  return absl::OkStatus();
}

absl::Status ShardedRound::Deliver(const std::string& member_id,
                                   std::vector<DigestPair> range_digests, absl::Time now) {
  Member* member = Find(member_id);
  if (phase_ != Phase::kExchanging || member == nullptr || member->slot < 0 || member->dropped) {
    return absl::FailedPreconditionError(
        absl::StrCat(member_id, " is not exchanging in round ", options_.number));
  }
  if (member->delivered) return absl::InvalidArgumentError("delivered: sent twice");
  if (range_digests.size() != shards_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("delivered.range_digests: ", range_digests.size(), " digests for ",
                     shards_.size(), " ranges"));
  }
  member->delivered = true;
  member->range_digests = std::move(range_digests);
  first_delivery_ = std::min(first_delivery_, now);
  last_delivery_ = std::max(last_delivery_, now);
  Advance(now);
  return absl::OkStatus();
}

void ShardedRound::Tick(absl::Time now) {
  if (phase_ == Phase::kGathering && now > options_.opened + options_.deadline) {
    int missing = 0;
    for (const Member& member : expected_) missing += !member.arrived && !member.dropped;
    for (Member& member : expected_) {
      if (!member.arrived && !member.dropped) {
        if (missing == 1) silent_.push_back(member.candidate.member_id);
        Drop(member, absl::StrCat("did not arrive within the round deadline (",
                                  absl::FormatDuration(options_.deadline), ")"));
      }
    }
    LayOut(now);
    Advance(now);
  } else if (phase_ == Phase::kGathering && now > GraceEnds()) {
    // Late, not faulty: the grace window is what a run with nodes of unequal speed asks for.
    const int expected = static_cast<int>(expected_.size());
    for (Member& member : expected_) {
      if (!member.arrived && !member.dropped && member.candidate.graced) {
        excused_.push_back(member.candidate.member_id);
        Drop(member, options_.grace.Reason(expected));
      }
    }
    Advance(now);  // lays out unless a leader starting up is still to come
  } else if (phase_ == Phase::kExchanging && now > laid_out_at_ + options_.deadline) {
    // An owner that has not delivered may not have averaged its range: nobody can be sure to
    // hold it. Others that have not delivered are dropped and the round goes on.
    std::vector<std::string> late;
    for (const Member& member : expected_) {
      if (Owns(member.slot) && !member.dropped && !member.delivered) {
        late.push_back(member.candidate.member_id);
        blamed_.push_back(RoundFault{member.candidate.member_id,
                                     "did not average its range within the round deadline", ""});
      }
    }
    if (!late.empty()) {
      AbortWith(absl::StrCat("owner ", absl::StrJoin(late, ", "),
                             " did not average its range within the round deadline (",
                             absl::FormatDuration(options_.deadline), ")"));
      return;
    }
    for (Member& member : expected_) {
      if (member.slot >= 0 && !member.dropped && !member.delivered) {
        Drop(member, absl::StrCat("did not receive the whole update within the round deadline (",
                                  absl::FormatDuration(options_.deadline), ")"));
      }
    }
    Advance(now);
  }
}

absl::Time ShardedRound::GraceEnds() const {
  std::vector<absl::Time> arrivals;
  for (const Member& member : expected_) {
    if (member.arrived) arrivals.push_back(member.arrived_at);
  }
  return options_.grace.Ends(std::move(arrivals), static_cast<int>(expected_.size()));
}

bool ShardedRound::Owns(int slot) const {
  return slot >= 0 && std::any_of(shards_.begin(), shards_.end(),
                                  [&](const Shard& shard) { return shard.owner_slot == slot; });
}

bool ShardedRound::Waiting(const std::string& but) const {
  return std::any_of(expected_.begin(), expected_.end(), [&](const Member& member) {
    return member.slot >= 0 && !member.dropped && !member.delivered &&
           member.candidate.member_id != but;
  });
}

void ShardedRound::LayOut(absl::Time now) {
  laid_out_at_ = now;
  std::vector<int> owners;  // slots
  for (Member& member : expected_) {
    if (!member.arrived || member.dropped) continue;
    member.slot = static_cast<int>(members_.size());
    members_.push_back(member.candidate.member_id);
    weights_.push_back(member.weight);
    if (!member.candidate.address.empty()) owners.push_back(member.slot);
  }
  phase_ = Phase::kExchanging;
  if (owners.empty()) {
    if (!members_.empty()) {
      AbortWith(
          "no member of the round serves a data plane (give node leaders --data_address, and "
          "under TLS --data_tls_cert and --data_tls_key)");
    }
    return;
  }
  const int chunks = options_.layout.num_chunks();
  int64_t k = std::min<int64_t>(static_cast<int64_t>(owners.size()), chunks);
  if (options_.min_shard_values > 0) {
    k = std::min(k, std::max<int64_t>(1, options_.layout.num_values / options_.min_shard_values));
  }
  for (int i = 0; i < static_cast<int>(k); ++i) {
    const Member& owner = *std::find_if(expected_.begin(), expected_.end(),
                                        [&](const Member& m) { return m.slot == owners[i]; });
    shards_.push_back(Shard{owners[i], owner.candidate.member_id, owner.candidate.address,
                            static_cast<int>(int64_t{i} * chunks / k),
                            static_cast<int>(int64_t{i + 1} * chunks / k)});
  }
  // Owners are the members with a data plane, in slot order: with one range each, the ring's
  // member i owns range i.
  ring_ = !options_.owners_hold_deltas && members_.size() >= 2 && shards_.size() == members_.size();
  laid_out_pending_ = true;
}

void ShardedRound::Advance(absl::Time now) {
  if (phase_ == Phase::kCommitted || phase_ == Phase::kAborted) return;
  int workers = 0;
  bool waiting = false;  // gathering: someone expected has not arrived
  for (const Member& member : expected_) {
    if (member.dropped) continue;
    if (phase_ == Phase::kGathering || member.slot >= 0) workers += member.candidate.workers;
    if (!member.arrived) waiting = true;
  }
  if (workers < options_.min_workers) {
    AbortWith(
        absl::StrCat("quorum lost: ", workers, " of min_workers ", options_.min_workers, " left"));
    return;
  }
  if (phase_ == Phase::kGathering) {
    if (!waiting) LayOut(now);
    return;
  }
  if (!Waiting()) phase_ = Phase::kCommitted;
}

bool ShardedRound::Verify() {
  if (phase_ != Phase::kCommitted) return phase_ != Phase::kAborted;
  std::vector<DigestBallot> ballots;
  std::vector<std::optional<DigestPair>> owners(shards_.size());  // each range's tie-breaker
  for (const Member& member : expected_) {
    if (member.slot < 0 || member.dropped) continue;
    ballots.push_back({member.candidate.member_id, member.range_digests});
    for (size_t s = 0; s < shards_.size(); ++s) {
      if (shards_[s].owner_slot == member.slot) owners[s] = member.range_digests[s];
    }
  }
  const DigestVote vote = VoteOnDigests(ballots, owners);
  // A range without a majority and without its owner: nobody can say which copy stands.
  std::vector<std::string> undecided;
  for (size_t s = 0; s < shards_.size(); ++s) {
    if (!vote.agreed[s].has_value()) {
      undecided.push_back(absl::StrCat(s, " (", shards_[s].owner_id, ")"));
    }
  }
  if (!undecided.empty()) {
    AbortWith(absl::StrCat("no majority of the members agrees on range",
                           undecided.size() == 1 ? " " : "s ", absl::StrJoin(undecided, ", "),
                           " and its owner is not in the round to break the tie"));
    return false;
  }
  std::vector<std::string> named;
  for (const DigestVote::Differing& differing : vote.differing) {
    diverged_.push_back(differing.member_id);
    blamed_.push_back(RoundFault{differing.member_id,
                                 "its copy of the global model differs from the others'", ""});
    named.push_back(absl::StrCat(differing.member_id, " (range",
                                 differing.ranges.size() == 1 ? " " : "s ",
                                 absl::StrJoin(differing.ranges, ", "), ")"));
  }
  if (!named.empty()) {
    AbortWith(absl::StrCat("the digests of ", absl::StrJoin(named, ", "),
                           " differ from the copy most members (or the range's owner) hold: ",
                           named.size() == 1 ? "its copy" : "their copies",
                           " of the global model would not be the others'"));
    return false;
  }
  std::vector<std::string> not_finite;
  for (size_t s = 0; s < shards_.size(); ++s) {
    if (*vote.agreed[s] == kNotFinite) {
      not_finite.push_back(absl::StrCat(s, " (", shards_[s].owner_id, ")"));
    } else {
      agreed_.push_back(*vote.agreed[s]);
    }
  }
  if (!not_finite.empty()) {
    AbortWith(absl::StrCat("the update of range", not_finite.size() == 1 ? " " : "s ",
                           absl::StrJoin(not_finite, ", "),
                           " overflows fp32 through the outer step (the deltas are too large)"));
  }
  return phase_ == Phase::kCommitted;
}

std::vector<RoundFault> ShardedRound::Faults() const {
  std::vector<RoundFault> faults;
  for (const auto& [id, reason] : all_drops_) {
    if (std::find(excused_.begin(), excused_.end(), id) != excused_.end()) continue;
    faults.push_back(
        RoundFault{id, reason, "", std::find(silent_.begin(), silent_.end(), id) != silent_.end()});
  }
  faults.insert(faults.end(), blamed_.begin(), blamed_.end());
  return faults;
}

void ShardedRound::AbortWith(const std::string& reason) {
  phase_ = Phase::kAborted;
  abort_reason_ = reason;
}

bool ShardedRound::TakeLaidOut() {
  const bool laid_out = laid_out_pending_ && phase_ != Phase::kAborted;
  laid_out_pending_ = false;
  return laid_out;
}

std::vector<std::pair<std::string, std::string>> ShardedRound::TakeDrops() {
  return std::move(drops_);
}

std::vector<std::string> ShardedRound::Included() const {
  std::vector<std::string> included;
  for (const Member& member : expected_) {
    if (member.slot >= 0 && !member.dropped) included.push_back(member.candidate.member_id);
  }
  return included;
}

int64_t ShardedRound::Step(int64_t floor, int64_t ceiling) const {
  std::vector<int64_t> claims;
  for (const Member& member : expected_) {
    if (member.slot >= 0 && !member.dropped) claims.push_back(member.step);
  }
  return RoundStep(std::move(claims), floor, ceiling);
}

absl::Duration ShardedRound::SlowestWait() const {
  return last_delivery_ > first_delivery_ ? last_delivery_ - first_delivery_ : absl::ZeroDuration();
}

}  // namespace localsgd
