#ifndef LOCALSGD_WORKER_HIERARCHICAL_AVERAGER_H_
#define LOCALSGD_WORKER_HIERARCHICAL_AVERAGER_H_

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "exchange/fragment_plan.h"
#include "worker/flat_model.h"
#include "worker/node_group.h"
#include "worker/node_leader.h"
#include "worker/parameter_averager.h"

namespace localsgd {

// docs/design.md ("One round, both modes") on one rank: the node's ranks average (Gloo/NCCL), the
// node leader syncs the node's mean with the coordinator, and broadcasts the result (global[r], or
// the node's mean when the round failed) to its ranks.
//
// When a collective fails (a rank of the node died), the ranks left re-form their group
// (NodeGroup::Reform) and go on from the leader's state: if the leader already holds the
// round's result, every rank takes it and the leader's step; else they redo the round among
// themselves (the leader's delta now weighs the ranks left). If the leader itself died, the
// lowest live local rank takes the lead (`take_lead`): it becomes the node's member at the
// coordinator in the dead leader's place, takes the run's committed model, and every rank of
// the node takes that model and step. If the group cannot re-form, or the new leader cannot
// take the lead, Health() says so and the worker stops.
//
// Overlapped rounds (docs/design.md, "Overlapped rounds"): Launch averages the ranks'
// snapshots within the node and the leader runs the round on a thread of its own while every
// rank trains on; Merge waits for it there, the leader broadcasts the outcome and each rank
// merges it into its own values. A collective that fails in Launch makes that round a blocking
// one among the ranks left; in Merge, the ranks left take the leader's result (or, when the
// leader died, the run's committed model from the new leader).
//
// Fragments (docs/design.md, "Streaming fragments"): a round carries the values of one
// fragment of the FragmentPlan; when it finds the run ahead of the node (stale, or ended) the
// leader holds the run's whole model and every rank takes all of it. Not thread-safe.
class HierarchicalAverager : public ParameterAverager {
 public:
  // Makes this rank its node's leader in place of the dead leader of local rank `dead_rank`.
  using TakeLead = std::function<absl::StatusOr<NodeLeader*>(int dead_rank)>;

  // `leader` is null on ranks that do not lead their node (the group's first rank does).
  // `group`, `leader` and what `take_lead` makes must outlive this object. `fragments`: the
  // run's (of the tensors' values).
  HierarchicalAverager(NodeGroup* group, NodeLeader* leader, TakeLead take_lead,
                       FragmentPlan fragments = FragmentPlan());
  // Waits for a round in flight.
  ~HierarchicalAverager() override;

  absl::Status Average(const std::vector<at::Tensor>& tensors, int fragment,
                       int64_t* step) override;
  absl::Status Launch(const std::vector<at::Tensor>& tensors, int fragment, int64_t* step) override;
  absl::Status Merge(const std::vector<at::Tensor>& tensors, int64_t* step) override;
  absl::Status Health() const override { return health_; }
  void SetTrainedSteps(int64_t steps) override { trained_steps_ = steps; }

  // Start of training: the leader offers global[0] and fetches the run's current global
  // model, every rank receives it; when the leader fails, every rank of the node returns an
  // error. Returns the run's global step at that model (0 for a new run; more for a node that
  // joins a run in progress, e.g. after a crash), the same on every rank of the node.
  absl::StatusOr<int64_t> Start(const std::vector<at::Tensor>& tensors);

 private:
  // What the leader tells its ranks after a round: its round's status code, whether it took a
  // model (the round's result, or the run's model when it missed rounds or the run ended),
  // and the step to go on from.
  struct Verdict {
    absl::StatusCode code = absl::StatusCode::kOk;
    bool took = false;
    int64_t step = 0;
    int round_fragment = -1;  // the open round's, when the leader's header carried another
  };
  // An overlapped round between Launch and Merge.
  struct InFlight {
    int fragment = 0;
    ValueRange range;     // the values the round carries
    int64_t step = 0;     // the optimizer step of the snapshot
    at::Tensor snapshot;  // this rank's values at that step (flat, on its device)
    at::Tensor values;    // leader: the node's mean on a CPU, then the round's result
    absl::Status status;  // leader: the round's outcome
    std::thread round;    // leader: runs the round
  };
  using Redo = std::function<at::Tensor()>;

  // All-reduce (if `average_first`), `leader_step` on the leader over a CPU view of `flat`,
  // broadcast. Returns a collective's failure; `*leader_has_result` tells whether the
  // leader's `flat` holds what every rank should take (its step ran).
  template <typename LeaderStep>
  absl::Status Exchange(at::Tensor& flat, bool average_first, LeaderStep leader_step,
                        bool* leader_has_result);
  // A round of `fragment` run at once on `tensors`, its collectives starting with `failure`
  // when not OK.
  absl::Status AverageNow(absl::Status failure, const std::vector<at::Tensor>& tensors,
                          int fragment, int64_t* step);
  // After a round's collectives ended with `failure` (OK: they went through): re-forms the
  // group and finishes the round (Recover), then shares the leader's verdict; nullopt when
  // that failed (a rank died just now: the group re-forms at the next collective).
  absl::StatusOr<std::optional<Verdict>> Conclude(absl::Status failure, at::Tensor& flat,
                                                  const Redo& redo, int fragment, int64_t* step,
                                                  bool leader_has_result,
                                                  absl::Status* sync_status);
  // What a rank's Average or Merge returns, from the leader's round and verdict.
  static absl::Status StatusOfRound(const absl::Status& sync_status, const Verdict& verdict);
  // After `failure`: re-forms the group and finishes the round as the class comment says
  // (a round redone starts from `redo()`). ABORTED, on every rank alike, when the ranks were
  // at rounds of different fragments (the round is given up; the step is the leader's).
  absl::Status Recover(absl::Status failure, const Redo& redo, at::Tensor& flat, int fragment,
                       int64_t* step, bool leader_has_result, absl::Status* sync_status);
  // With fragments, after a round that found the run ahead (`verdict`: the leader took the
  // run's model): every rank takes the leader's whole model. Whether it did so (false without
  // fragments, or for another verdict); an error when the broadcast failed.
  absl::StatusOr<bool> TakeRunModel(const Verdict& verdict, const std::vector<at::Tensor>& tensors);
  // The values of `fragment` (every value without fragments).
  ValueRange RangeOf(int fragment, const std::vector<at::Tensor>& tensors) const {
    return fragments_.size() == 1
               ? WholeModel(tensors)
               : ValueRange{fragments_.begin(fragment), fragments_.values(fragment)};
  }
  IntraNodeAverager& intra() { return group_->averager(); }

  NodeGroup* const group_;
  NodeLeader* leader_;
  const TakeLead take_lead_;
  const FragmentPlan fragments_;
  int leader_rank_;            // the local rank that leads the node
  int64_t trained_steps_ = 0;  // SetTrainedSteps's, for the leader's next round
  absl::Status health_;
  std::unique_ptr<InFlight> in_flight_;
};

}  // namespace localsgd

#endif  // LOCALSGD_WORKER_HIERARCHICAL_AVERAGER_H_
