#ifndef LOCALSGD_COORDINATOR_SYNC_ADMISSION_H_
#define LOCALSGD_COORDINATOR_SYNC_ADMISSION_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "exchange/fragment_plan.h"
#include "proto/localsgd/v1/averaging.pb.h"

namespace localsgd {

// What a node leader's Sync header is admitted against (docs/design.md, "Claims checked"):
// the leader as the coordinator saw it join, and the run's model and rounds.
struct SyncAdmission {
  // The leader: the local_world_size it joined with, and the ranks of its node that are live
  // members (ControlPlane::Leader).
  int local_world_size = 1;
  int ranks = 1;
  // The run's model: whether it is initialised, its fragments, codec and committed round.
  bool initialised = false;
  FragmentPlan fragments;
  v1::Codec codec = v1::CODEC_FP32;
  int64_t committed_round = 0;
  // The fragment of the round open now, if one is.
  std::optional<int> open_fragment;
  // Why the member sits rounds out (Suspensions); empty when it does not.
  std::string suspended;
  // Paced runs (RunSpec.round_seconds): the most optimizer steps a delta's weight may count
  // (local_sgd_steps); 0 in fixed-K runs.
  int64_t paced_max_steps = 0;
};

// The header as the coordinator takes it (a claim of more ranks than the node's live members
// is weighed at those; in paced runs, a claim of more steps than paced_max_steps at those), or
// the refusal naming the field: INVALID_ARGUMENT for a claim that is never valid (num_workers
// outside [1, local_world_size], a weight other than num_workers (paced runs: num_workers
// times a whole number of steps, at least 1), a
// negative step, an unknown codec, a fragment or vector_length or codec that is not the run's),
// FAILED_PRECONDITION for one not valid now (no model yet, a suspended member, a stale or
// future round, another fragment than the open round's). A pure function: the run being
// RUNNING is the caller's to check.
absl::StatusOr<v1::SyncHeader> AdmitSyncHeader(const v1::SyncHeader& claimed,
                                               const SyncAdmission& at);

// Where the run stands when a Sync header was not taken.
struct RefusalContext {
  // The run's model: its run, whether it is set, the round and global step it is at.
  std::string run_id;
  bool initialised = false;
  int64_t committed_round = 0;
  int64_t global_step = 0;
  // The run ended (completed, stopped or failed).
  bool run_ended = false;
  // The round open now (number, fragment), if one is.
  std::optional<std::pair<int64_t, int>> open_round;
};
// What a header that was not taken (`status`) is told beside the status, and whether the member
// sits the round out for it.
struct RefusalAnswer {
  // The structured answer the member acts on (SyncResponse.stale or .other_fragment), if any.
  std::optional<v1::SyncResponse> response;
  // Leave the member out of the open round (or the next one), and whether that is `excused`
  // (RoundDriver::Refuse): a member out of phase is not at fault.
  bool refuse = false;
  bool excused = false;
};
// A pure function. A stale header (a round of the model's run that committed already) is told
// the committed round to adopt, and so is one of a run that ended; a header of another fragment
// than the open round's is told that round's fragment. A live leader whose header is refused is
// left out of the round at once, so the others need not wait for it: not a stale one (it adopts
// the model and comes back for the next round), and not for a duplicate header, an aborted round
// or one to try again, which are no fault of the member.
RefusalAnswer AnswerRefusal(const v1::SyncHeader& header, const absl::Status& status,
                            const RefusalContext& at);

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_SYNC_ADMISSION_H_
