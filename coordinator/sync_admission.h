#ifndef LOCALSGD_COORDINATOR_SYNC_ADMISSION_H_
#define LOCALSGD_COORDINATOR_SYNC_ADMISSION_H_

#include <cstdint>
#include <optional>
#include <string>

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
};

// The header as the coordinator takes it (a claim of more ranks than the node's live members
// is weighed at those), or the refusal naming the field: INVALID_ARGUMENT for a claim that is
// never valid (num_workers outside [1, local_world_size], a weight other than num_workers, a
// negative step, an unknown codec, a fragment or vector_length or codec that is not the run's),
// FAILED_PRECONDITION for one not valid now (no model yet, a suspended member, a stale or
// future round, another fragment than the open round's). A pure function: the run being
// RUNNING is the caller's to check.
absl::StatusOr<v1::SyncHeader> AdmitSyncHeader(const v1::SyncHeader& claimed,
                                               const SyncAdmission& at);

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_SYNC_ADMISSION_H_
