#ifndef LOCALSGD_COORDINATOR_RESTORE_PLAN_H_
#define LOCALSGD_COORDINATOR_RESTORE_PLAN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/localsgd/v1/averaging.pb.h"
#include "proto/localsgd/v1/coordinator.pb.h"

namespace localsgd {

// What a restarted coordinator does with the model its state folder kept (docs/design.md,
// "Persistence"), decided from the saved model's round and global step and the run record
// alone: commits are announced before their model is on disk, and a model is saved before the
// record follows it, so the two may be one commit apart either way, or more rounds apart when
// the model is behind.
struct RestorePlan {
  // The round and global step the model is restored as.
  int64_t round = 0;
  int64_t global_step = 0;
  // The run record must take a commit first: the saved round (the record did not follow it),
  // or, for a running run behind the record, the round after the record's (`restored`: the
  // global step goes back to the saved model's).
  bool commit = false;
  bool restored = false;
  // Rounds were committed whose model was lost: a warning, not news.
  bool lost_rounds = false;
  // What the restore changed, for its event ("" when nothing).
  std::string note;
};

// The plan for a model of `saved_round` (at `saved_step`) of the run `run` records.
// FAILED_PRECONDITION when the model is more than one commit ahead of the record.
absl::StatusOr<RestorePlan> PlanRestore(int64_t saved_round, int64_t saved_step,
                                        const v1::RunInfo& run);

// Whether a node leader's checkpoint offered as run `run`'s model (InitModelHeader with
// from_checkpoint; docs/design.md, "Checkpoints") can be its model: a round the run committed
// (at the record's global step when it is the record's round; an older one within total_steps,
// since a restore may have taken the record's step back), and momentum exactly when the run's
// outer optimizer keeps it. FAILED_PRECONDITION naming checkpoint_round or
// checkpoint_global_step, INVALID_ARGUMENT naming has_momentum.
absl::Status CheckCheckpointOffer(const v1::InitModelHeader& header, const v1::RunInfo& run);

// An InitModel header as such: a vector_length in [1, 2^32], and the checkpoint's fields only
// with from_checkpoint. INVALID_ARGUMENT naming the field.
absl::Status CheckInitModelHeader(const v1::InitModelHeader& header);

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_RESTORE_PLAN_H_
