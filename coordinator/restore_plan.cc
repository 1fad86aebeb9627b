#include "coordinator/restore_plan.h"

#include "absl/strings/str_cat.h"
#include "exchange/codec.h"

namespace localsgd {

absl::StatusOr<RestorePlan> PlanRestore(int64_t saved_round, int64_t saved_step,
                                        const v1::RunInfo& run) {
  if (saved_round > run.round() + 1) {
    return absl::FailedPreconditionError("the model is more than one commit ahead");
  }
  RestorePlan plan;
  plan.round = saved_round;
  plan.global_step = saved_step;
  if (saved_round == run.round() + 1) {
    // The model was saved, then the coordinator stopped before the run record followed.
    plan.commit = true;
    plan.note =
        absl::StrCat("; round ", saved_round, " was saved but not recorded: recorded it now");
  } else if (saved_round < run.round() && run.state() == v1::RUN_STATE_RUNNING) {
    // The members went on past the saved model. It is committed again, as the round after the
    // record's (rounds only move forward), at its own global step; members adopt it as the
    // committed model, as stale members do, and train the lost rounds' steps again.
    plan.round = run.round() + 1;
    plan.commit = true;
    plan.restored = true;
    plan.lost_rounds = true;
    plan.note = absl::StrCat("; rounds ", saved_round + 1, " to ", run.round(),
                             " were committed after it and their model is lost: the run goes "
                             "on from this one as round ",
                             plan.round, " at global step ", saved_step);
  } else if (saved_round < run.round()) {
    plan.lost_rounds = true;
    plan.note = absl::StrCat("; the run ended at round ", run.round(),
                             ", whose model was not on disk yet: this is its latest saved model");
  }
  return plan;
}

absl::Status CheckCheckpointOffer(const v1::InitModelHeader& header, const v1::RunInfo& run) {
  if (header.checkpoint_round() < 0 || header.checkpoint_round() > run.round()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint_round: ", header.checkpoint_round(), " is not a committed round of run ",
        run.run_id(), " (it is at round ", run.round(), ")"));
  }
  if (header.checkpoint_round() == run.round() &&
      header.checkpoint_global_step() != run.global_step()) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint_global_step: round ", run.round(), " of run ", run.run_id(),
                     " committed at global step ", run.global_step(), ", not ",
                     header.checkpoint_global_step()));
  }
  // (Older rounds are not bound by the record's global step: a restore may have taken it back.)
  if (header.checkpoint_global_step() < 0 ||
      (run.total_steps() > 0 && header.checkpoint_global_step() > run.total_steps())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint_global_step: ", header.checkpoint_global_step(), " is not a step of run ",
        run.run_id(), " (total_steps ", run.total_steps(), ")"));
  }
  const bool keeps_momentum = run.spec().outer_optimizer().momentum() > 0;
  if (header.has_momentum() != keeps_momentum) {
    return absl::InvalidArgumentError(
        absl::StrCat("has_momentum: the run's outer optimizer ", keeps_momentum ? "has" : "has no",
                     " momentum, the checkpoint ", header.has_momentum() ? "has" : "has none"));
  }
  return absl::OkStatus();
}

absl::Status CheckInitModelHeader(const v1::InitModelHeader& header) {
  constexpr int64_t kMaxVectorLength = int64_t{1} << 32;
  if (header.vector_length() <= 0 || header.vector_length() > kMaxVectorLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("vector_length: must be in [1, 2^32], got ", header.vector_length()));
  }
  if (!header.from_checkpoint() && (header.has_momentum() || header.checkpoint_round() != 0 ||
                                    header.checkpoint_global_step() != 0)) {
    return absl::InvalidArgumentError(
        "has_momentum, checkpoint_round, checkpoint_global_step: for a checkpoint only "
        "(from_checkpoint)");
  }
  return absl::OkStatus();
}

}  // namespace localsgd
