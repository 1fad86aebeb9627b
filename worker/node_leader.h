#ifndef LOCALSGD_WORKER_NODE_LEADER_H_
#define LOCALSGD_WORKER_NODE_LEADER_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/model_store.h"
#include "exchange/chunking.h"
#include "exchange/exchange.h"
#include "exchange/fragment_plan.h"
#include "exchange/held_model.h"
#include "exchange/model_client.h"
#include "exchange/model_fetcher.h"

namespace localsgd {

// The node leader's side of the rounds, on flat float vectors (no LibTorch): it keeps
// global[r-1], the last agreed model (and in sharded rounds the outer momentum, since every
// member applies the outer step itself), and turns the node's parameters into global[r]
// through one round of the run's Exchange per call. Thread-compatible.
class NodeLeader {
 public:
  // `models` fetches and uploads the run's model, `exchange` runs the rounds; both outlive
  // the leader. `fragments`: the run's (RunSpec.fragments) over `layout`.
  // `held`: where the leader keeps the model, which the node's data plane serves (null: a
  // model of its own); `fetcher`: how it fetches the committed model (null: from the
  // coordinator alone). Both outlive the leader.
  NodeLeader(ModelClient* models, Exchange* exchange, SyncMember member, ChunkLayout layout,
             absl::Duration round_timeout, FragmentPlan fragments = FragmentPlan(),
             HeldModel* held = nullptr, const ModelFetcher* fetcher = nullptr);

  // Start of training: offers `params` as global[0] (the first leader's upload wins), then
  // fetches the run's current global model into `params` and keeps it. Transient failures (the
  // coordinator restarting or out of reach, this member's lease lost and being renewed) are
  // retried within the round timeout. FAILED_PRECONDITION when the run's model has another
  // number of values (a different model).
  absl::Status Start(absl::Span<float> params);

  // Before Start: offers `checkpoint` (this node's, of the run) as the run's model at Start
  // (docs/design.md, "Checkpoints"): the coordinator takes it when it holds no model of the
  // run or an older one it restored; the node then goes on from it. FAILED_PRECONDITION (saying
  // why) for a checkpoint of another run or model.
  absl::Status ResumeFrom(ModelCheckpoint checkpoint);

  // One round of fragment `fragment` (0 without fragments), `params` being its values: on
  // success they become global[r]'s. A leader that took over from one that died (no Start)
  // adopts the run's committed model into `params` instead and returns a StaleRound error, as
  // for a stale member: the node goes on from there, and the fragment is still to sync (at the
  // run's last step the sync is tried again, so the node ends on the run's final model). When this
  // leader missed a round (stale) it adopts the current global model and returns the error; when
  // the run has ended it adopts the run's final model and returns OUT_OF_RANGE (stop training: no
  // more rounds); in both cases global() holds the whole model. On other errors (round aborted,
  // coordinator unreachable) `params` keeps the node's own values. global_step() then says where
  // the run is. `trained_steps` > 0 (paced runs): the optimizer steps the node trained since it
  // last synced these values; the delta weighs its ranks times them (else its ranks).
  absl::Status Sync(absl::Span<float> params, int64_t step, int fragment = 0,
                    int64_t trained_steps = 0);

  // The node now has `n` ranks (it re-formed after a rank died): later rounds weigh its
  // delta by n.
  void SetNodeWorkers(int n) {
    member_.weight = n;
    member_.num_workers = n;
  }

  int64_t round() const { return held_->round(); }
  // global[round()], the whole model.
  absl::Span<const float> global() const { return held_->values(); }
  // The run's global step when global[round()] was committed (0 before any round).
  int64_t global_step() const { return held_->global_step(); }

 private:
  // One attempt of Start within `timeout` (a refused checkpoint: again at once without it).
  absl::Status StartOnce(absl::Span<float> params, absl::Duration timeout);
  // Fetches the run's committed model (and momentum) into the held model.
  absl::Status Adopt(absl::Duration timeout);

  ModelClient* const models_;
  const ModelFetcher* const fetcher_;
  Exchange* const exchange_;
  SyncMember member_;
  const ChunkLayout layout_;
  const absl::Duration round_timeout_;
  const FragmentPlan fragments_;
  HeldModel own_held_;     // when no other is given
  HeldModel* const held_;  // the model, and the outer momentum when the exchange keeps it
  bool adopted_ = false;   // the held model is the run's (Start or Adopt)
  std::optional<ModelCheckpoint> resume_;  // offered at Start (ResumeFrom)
};

}  // namespace localsgd

#endif  // LOCALSGD_WORKER_NODE_LEADER_H_
