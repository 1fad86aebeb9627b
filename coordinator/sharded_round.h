#ifndef LOCALSGD_COORDINATOR_SHARDED_ROUND_H_
#define LOCALSGD_COORDINATOR_SHARDED_ROUND_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "coordinator/round_grace.h"
#include "coordinator/suspensions.h"
#include "exchange/chunking.h"
#include "exchange/model_digest.h"

namespace localsgd {

// The decisions of one sharded round (docs/design.md, "Sharded rounds"), free of gRPC and of
// any clock of its own: who is in the round, who owns which range, when the layout goes out,
// who is dropped, and when the round commits or aborts. The round manager feeds it events and
// acts on what it reports.
//
// Gathering: the round waits for a header from every node leader that was live when it
// opened; one that left, or had not arrived by the deadline or the grace window's end, is left
// out. The layout then
// assigns contiguous, balanced, chunk-aligned ranges to the members that serve a data plane
// (the first of them in slot order, no more than there are chunks or min_shard_values allow).
// Exchanging: owners send each averaged chunk of their range to every member (the coordinator
// gets none); members say when they hold every chunk, with the digests of their next copy. The
// round commits once every member still in the round has delivered and their digests agree
// (Verify). It aborts when an owner leaves while another member has not delivered, when the
// deadline passes (counted again from the layout) with an owner that has not delivered, or when
// fewer than min_workers workers are left. A member that leaves otherwise, or has not delivered
// by the deadline, is dropped and the round goes on without it.
// Thread-compatible.
class ShardedRound {
 public:
  struct Candidate {
    std::string member_id;
    int workers = 1;      // ranks it stands for
    std::string address;  // its data plane; empty: it owns no range
    bool graced = true;   // the grace window may leave it out (not a leader starting up)
  };
  struct Options {
    int64_t number = 0;
    ChunkLayout layout;
    absl::Time opened;
    absl::Duration deadline = absl::Seconds(60);
    // Members not in by its end are left out, not held at fault (RunSpec.round_grace_seconds).
    RoundGrace grace;
    int min_workers = 1;
    // The least values of the vector one owner averages (RunSpec.min_shard_bytes / 4): a
    // small vector gets fewer owners than members. 0: a chunk is enough.
    int64_t min_shard_values = 0;
    // Whether owners hold every member's whole delta of their range (screening, a trimmed
    // mean): running sums cannot, so no ring.
    bool owners_hold_deltas = false;
  };
  struct Shard {
    int owner_slot = -1;  // the owner's position in members()
    std::string owner_id;
    std::string address;
    int begin_chunk = 0;
    int end_chunk = 0;
  };
  enum class Phase { kGathering, kExchanging, kCommitted, kAborted };

  ShardedRound(Options options, std::vector<Candidate> expected);

  // A member's header: FAILED_PRECONDITION when it is not expected in this round (it joined
  // after the round opened, or was dropped), when the layout is already out, or when it came
  // twice.
  absl::Status Arrive(const std::string& member_id, double weight, int64_t step, absl::Time now);
  // The member is gone (stream ended, lease expired, header refused); `excused`: not held
  // against it in Faults().
  void Leave(const std::string& member_id, const std::string& reason, absl::Time now,
             bool excused = false);
  // The member's exchange with an owner failed: the owner's range cannot reach everyone, so
  // the round aborts naming both. INVALID_ARGUMENT when that member owns nothing here.
  absl::Status Unreachable(const std::string& member_id, const std::string& owner_id,
                           const std::string& reason);
  // The member holds every averaged chunk (at `now`), and its copy of each range will have
  // `range_digests` (by shard) at the commit. INVALID_ARGUMENT naming the field when there is
  // not one digest per range.
  absl::Status Deliver(const std::string& member_id, std::vector<DigestPair> range_digests,
                       absl::Time now);
  // Once complete (kCommitted): the members still in the round vote on their digests
  // (VoteOnDigests: a strict majority, else the range owner's). A member whose copy differs from
  // the agreed one is named in the abort (with the ranges) and listed in diverged(); a range
  // without a majority and without its owner, or agreed to be kNotFinite (the outer step
  // overflows), aborts the round too. False when the round aborted; else agreed() holds the
  // digests of the copy every member holds.
  bool Verify();
  // By shard, once Verify returned true.
  const std::vector<DigestPair>& agreed() const { return agreed_; }
  // Deadlines, and the grace window.
  void Tick(absl::Time now);

  Phase phase() const { return phase_; }
  int64_t number() const { return options_.number; }
  const std::string& abort_reason() const { return abort_reason_; }
  // True once, right after the layout was made: send the RoundHeader to every member.
  bool TakeLaidOut();
  // Members dropped since the last call, with the reason (owners must stop waiting for them).
  std::vector<std::pair<std::string, std::string>> TakeDrops();

  // The layout (valid from the exchange on): members by slot, their weights, the shards.
  const std::vector<std::string>& members() const { return members_; }
  const std::vector<double>& weights() const { return weights_; }
  const std::vector<Shard>& shards() const { return shards_; }
  // The ring schedule (RoundHeader.ring; docs/design.md, "Ring rounds"): 2 or more members,
  // each the owner of one range, shards()[i] being members()[i]'s.
  bool ring() const { return ring_; }
  // Members still in the round (not dropped), in slot order, and the global step their claims
  // give the round (RoundStep, at least `floor`).
  std::vector<std::string> Included() const;
  int64_t Step(int64_t floor, int64_t ceiling = 0) const;
  // Every member dropped so far, with its reason, in order.
  const std::vector<std::pair<std::string, std::string>>& dropped() const { return all_drops_; }
  // The members whose digests differed from the agreed ones (Verify), in slot order.
  const std::vector<std::string>& diverged() const { return diverged_; }
  // From the first member's delivery to the last one's (0 before two deliveries).
  absl::Duration SlowestWait() const;
  // What the round holds against its members (Suspensions): every drop, and the owners its
  // abort names (late, unusable, or reported unreachable by a member).
  std::vector<RoundFault> Faults() const;

 private:
  struct Member {
    Candidate candidate;
    bool arrived = false;
    absl::Time arrived_at;
    bool dropped = false;
    bool delivered = false;
    std::vector<DigestPair> range_digests;  // by shard, once delivered
    double weight = 0;
    int64_t step = 0;
    int slot = -1;  // in members_, once laid out
  };

  Member* Find(const std::string& member_id);
  void Drop(Member& member, const std::string& reason);
  void LayOut(absl::Time now);
  // Quorum, then the layout once everyone expected is in, or the commit once complete.
  void Advance(absl::Time now);
  void AbortWith(const std::string& reason);
  // When the grace window ends (RoundGrace::Ends over the arrivals so far).
  absl::Time GraceEnds() const;
  // Whether the member in `slot` owns a range.
  bool Owns(int slot) const;
  // Whether a member still in the round (other than `but`) has not delivered.
  bool Waiting(const std::string& but = "") const;

  Options options_;
  std::vector<Member> expected_;
  Phase phase_ = Phase::kGathering;
  absl::Time laid_out_at_;
  bool laid_out_pending_ = false;
  std::string abort_reason_;
  std::vector<std::string> members_;
  std::vector<double> weights_;
  bool ring_ = false;
  std::vector<Shard> shards_;
  std::vector<std::pair<std::string, std::string>> drops_;
  std::vector<std::pair<std::string, std::string>> all_drops_;
  std::vector<RoundFault> blamed_;    // by the abort
  std::vector<std::string> excused_;  // dropped, not held against them
  std::vector<std::string> silent_;   // dropped at the deadline, alone in not arriving
  std::vector<std::string> diverged_;
  std::vector<DigestPair> agreed_;
  absl::Time first_delivery_ = absl::InfiniteFuture();
  absl::Time last_delivery_ = absl::InfinitePast();
};

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_SHARDED_ROUND_H_
