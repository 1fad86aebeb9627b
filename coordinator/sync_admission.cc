#include "coordinator/sync_admission.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_util.h"
#include "exchange/codec.h"

namespace localsgd {

absl::StatusOr<v1::SyncHeader> AdmitSyncHeader(const v1::SyncHeader& claimed,
                                               const SyncAdmission& at) {
  // A node leader stands for its node's live ranks: at most the local_world_size it joined
  // with, or it is refused.
  if (claimed.num_workers() < 1 || claimed.num_workers() > at.local_world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_workers: must be in [1, ", at.local_world_size,
        "] (the local_world_size this node leader joined with), got ", claimed.num_workers()));
  }
  // A member's delta weighs as many ranks as it stands for, no more (docs/design.md,
  // "Faults"): one member can neither outweigh the others a thousandfold nor cancel them. In
  // paced runs, times the optimizer steps it trained ("Paced rounds"), no more than a round's
  // local_sgd_steps: no more than a member at full speed.
  const double steps = claimed.weight() / claimed.num_workers();
  if (at.paced_max_steps == 0 && claimed.weight() != claimed.num_workers()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weight: must be num_workers (", claimed.num_workers(), "), got ", claimed.weight()));
  }
  if (at.paced_max_steps > 0 && !(steps >= 1 && steps <= 1e12 && steps == std::floor(steps))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weight: must be num_workers (", claimed.num_workers(),
        ") times the optimizer steps trained (a whole number >= 1), got ", claimed.weight()));
  }
  // And it weighs no more ranks than the coordinator saw its node join (a rank that has not
  // joined again yet after a restart counts once it has): the weight is the coordinator's,
  // not the member's claim.
  v1::SyncHeader header = claimed;
  header.set_num_workers(std::min(claimed.num_workers(), at.ranks));
  header.set_weight(at.paced_max_steps == 0
                        ? header.num_workers()
                        : header.num_workers() * std::min<double>(steps, at.paced_max_steps));
  if (header.step() < 0) return absl::InvalidArgumentError("step: must be >= 0");
  if (!v1::Codec_IsValid(header.codec())) {
    return absl::InvalidArgumentError(absl::StrCat("codec: unknown codec ", header.codec()));
  }
  if (!at.initialised) {
    return absl::FailedPreconditionError("the run's model is not initialised (InitModel first)");
  }
  const FragmentPlan& fragments = at.fragments;
  if (header.fragment() < 0 || header.fragment() >= fragments.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fragment: ", header.fragment(), " is not in [0, fragments = ", fragments.size(), ")"));
  }
  if (const int64_t values = fragments.values(header.fragment());
      header.vector_length() != values) {
    return absl::InvalidArgumentError(fragments.size() == 1
                                          ? absl::StrCat("vector_length: ", header.vector_length(),
                                                         ", the run's model has ", values)
                                          : absl::StrCat("vector_length: ", header.vector_length(),
                                                         ", fragment ", header.fragment(),
                                                         " of the run's model has ", values));
  }
  if (header.codec() != at.codec) {
    return absl::InvalidArgumentError(
        absl::StrCat("codec: ", CodecName(header.codec()), ", the run uses ", CodecName(at.codec)));
  }
  if (!at.suspended.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("member_id: ", Quoted(header.member_id()), " is ", at.suspended));
  }
  const int64_t next = at.committed_round + 1;
  if (header.round() <= at.committed_round) {
    return absl::FailedPreconditionError(absl::StrCat("round: ", header.round(),
                                                      " is stale; round ", at.committed_round,
                                                      " is committed (fetch the model and go on)"));
  }
  if (header.round() > next) {
    return absl::FailedPreconditionError(
        absl::StrCat("round: ", header.round(), " is in the future; the next round is ", next));
  }
  if (at.open_fragment.has_value() && header.fragment() != *at.open_fragment) {
    // A member a step apart from the round's (at the run's end, one that syncs its fragments
    // in another order): it sits this round out and tries again.
    return absl::FailedPreconditionError(absl::StrCat("fragment: ", header.fragment(), ", round ",
                                                      next, " carries fragment ",
                                                      *at.open_fragment));
  }
  return header;
}

RefusalAnswer AnswerRefusal(const v1::SyncHeader& header, const absl::Status& status,
                            const RefusalContext& at) {
  RefusalAnswer answer;
  if (status.ok()) return answer;
  const bool not_now = absl::IsFailedPrecondition(status);
  const bool of_model = header.run_id() == at.run_id;
  const bool stale = not_now && of_model && header.round() <= at.committed_round;
  const bool ended = not_now && of_model && at.initialised && at.run_ended;
  const bool other_fragment = not_now && of_model && at.open_round.has_value() &&
                              header.round() == at.open_round->first &&
                              header.fragment() != at.open_round->second;
  if (stale || ended) {
    v1::StaleRound* out = answer.response.emplace().mutable_stale();
    out->set_committed_round(at.committed_round);
    out->set_global_step(at.global_step);
    out->set_run_ended(ended);
  } else if (other_fragment) {
    v1::RoundFragment* out = answer.response.emplace().mutable_other_fragment();
    out->set_round(at.open_round->first);
    out->set_fragment(at.open_round->second);
  }
  answer.refuse = !absl::IsAlreadyExists(status) && !absl::IsAborted(status) &&
                  !absl::IsUnavailable(status) && !stale;
  answer.excused = other_fragment;
  return answer;
}

}  // namespace localsgd
