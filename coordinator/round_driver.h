#ifndef LOCALSGD_COORDINATOR_ROUND_DRIVER_H_
#define LOCALSGD_COORDINATOR_ROUND_DRIVER_H_

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/control_plane.h"
#include "coordinator/round_sessions.h"
#include "coordinator/suspensions.h"
#include "exchange/model_digest.h"
#include "exchange/range_reducer.h"
#include "proto/localsgd/v1/averaging.pb.h"
#include "proto/localsgd/v1/coordinator.pb.h"

namespace localsgd {

// The open round as its driver sees it (the round manager implements it): the run, the round,
// the members' Sync streams in it (sessions), and the round's end. Every call is made under
// the round manager's lock, by the driver of the open round.
class RoundContext {
 public:
  struct Round {
    int64_t number = 0;
    int fragment = 0;     // RunSpec.fragments: the fragment it carries
    int first_chunk = 0;  // the fragment's first chunk in the model (GlobalModel::first_chunk)
    absl::Time opened;
    ChunkLayout layout;  // the fragment's chunks, counted from its first
    // What a star round averages on (GlobalModel::RoundReducer); null for a sharded round.
    std::shared_ptr<RangeReducer> reducer;
    // Leaders not heard in this run yet (starting up: loading data, taking the model): the
    // grace window (RunSpec.round_grace_seconds) does not leave them out.
    std::set<std::string> starting;
  };

  virtual ~RoundContext() = default;
  virtual absl::Time Now() const = 0;
  virtual const std::string& run_id() const = 0;
  virtual const v1::RunSpec& spec() const = 0;
  // The last committed round and its global step.
  virtual int64_t committed_round() const = 0;
  virtual int64_t committed_step() const = 0;
  // The most a round may move the global step to (StepCeiling past committed_step()).
  int64_t step_ceiling() const;
  virtual const Round& round() const = 0;
  // Names a new attempt at a round (RoundHeader.attempt).
  virtual uint64_t NextAttempt() = 0;

  // The members' Sync streams in the round.
  virtual RoundSessions& sessions() = 0;
  // Model bytes the round took from members and sent them.
  virtual void CountBytes(int64_t received, int64_t sent) = 0;

  // Whether a commit the driver decided may go ahead now (else it waits for the next Advance).
  virtual bool MayCommit() const = 0;
  // The round's update is decided (a star round's is in its reducer): commit it with
  // `included` at global step `step`,
  // the fragment's digest now `digest` (ModelDigest from its first chunk); `log` describes the
  // round. The driver is destroyed with the round.
  virtual void Commit(const std::vector<std::string>& included, int64_t step, DigestPair digest,
                      std::string log) = 0;
  // Ends every session with ABORTED and records the round. The driver is destroyed with it.
  virtual void Abort(const std::string& reason) = 0;
};

// One exchange mode's round (StarDriver, ShardedDriver): it holds the mode's decisions
// (StarRound, ShardedRound) and acts on them through its RoundContext. The round manager
// calls it under its lock; the mode's own calls (a star round's chunks, a sharded round's
// means and deliveries) are on the mode's class.
class RoundDriver {
 public:
  virtual ~RoundDriver() = default;
  // A header the round manager checked: enters the member into the round; its session id.
  virtual absl::StatusOr<int64_t> Arrive(const v1::SyncHeader& header,
                                         std::shared_ptr<RoundMember> stream) = 0;
  // A live leader whose header was refused leaves the round (if it has not joined it);
  // `excused`: it is not held against it (Suspensions), as for a member a fragment apart.
  virtual void Refuse(const std::string& member_id, const std::string& reason, bool excused) = 0;
  // The session's stream ended or broke.
  virtual void Leave(int64_t session, const absl::Status& why) = 0;
  // The member closed its side of the stream.
  virtual void EndOfInput(int64_t session) = 0;
  // Deadlines, and the leaders still live.
  virtual void Tick(absl::Time now, const std::vector<ControlPlane::Leader>& leaders) = 0;
  // After any change: drops, layout, sends, then commit or abort.
  virtual void Advance() = 0;
  // The round is aborting: forget the mode's partial work.
  virtual void OnAbort() {}
  // The mode's part of the round's record.
  virtual void Record(v1::RoundRecord* record) const = 0;
  // What the round holds against its members, for the suspensions.
  virtual std::vector<RoundFault> Faults() const = 0;
};

// The members dropped (with their reasons) and the slowest wait, into `record`.
void RecordRoundOutcomes(const std::vector<std::pair<std::string, std::string>>& dropped,
                         absl::Duration slowest_wait, v1::RoundRecord* record);

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_ROUND_DRIVER_H_
