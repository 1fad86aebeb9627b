#ifndef LOCALSGD_WORKER_PARAMETER_AVERAGER_H_
#define LOCALSGD_WORKER_PARAMETER_AVERAGER_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"

namespace localsgd {

// Replaces a model's tensors with their average across every worker of the run. LocalSGD
// calls it every local_sgd_steps optimizer steps. Implementations: HierarchicalAverager (the
// ranks of a node average first, then the node leader syncs with the coordinator) and test
// fakes. Not thread-safe: one call at a time.
class ParameterAverager {
 public:
  virtual ~ParameterAverager() = default;

  // Averages `tensors` (parameters, and buffers unless turned off) in place; with fragments
  // (RunSpec.fragments) only the values of fragment `fragment` (FragmentPlan; 0 without), the
  // others staying as they are, unless the round finds the run ahead of this node (a stale
  // round, or the run ended): then every value takes the run's model. `*step` is the
  // caller's optimizer step count; the averager may move it when the worker must take up
  // another step with the tensors it returns (its node re-formed after a rank died and goes
  // on from the node leader's step). On error (a round aborted, say) the tensors hold this
  // worker's own values, or its node's mean, and training goes on, unless Health() is an error.
  virtual absl::Status Average(const std::vector<at::Tensor>& tensors, int fragment,
                               int64_t* step) = 0;

  // Overlapped rounds (RunSpec.overlap_steps; docs/design.md, "Overlapped rounds"). Launch, at
  // optimizer step `*step` (a round's step): this rank's snapshot of `tensors` (of fragment
  // `fragment`) goes into a round that runs beside training. Merge, overlap_steps later: waits for
  // that round and applies it, tensors <- G' + (tensors - snapshot); a round that did not commit
  // leaves the tensors as they are, a run that ended leaves its final model. Either call may
  // move `*step` as Average does, and either may have to run a round at once (Launch after a
  // rank of the node died): its result is then applied. One round in flight at a time; Merge
  // with none is a no-op. The defaults run the round in Launch (Average on a copy) and apply
  // it in Merge, for averagers with nothing to overlap.
  virtual absl::Status Launch(const std::vector<at::Tensor>& tensors, int fragment, int64_t* step);
  virtual absl::Status Merge(const std::vector<at::Tensor>& tensors, int64_t* step);

  // Paced runs (RunSpec.round_seconds; docs/design.md, "Paced rounds"): the optimizer steps the
  // delta of the next Average or Launch covers, which its weight counts. The default ignores
  // it (fixed-K runs, and averagers with no weights).
  virtual void SetTrainedSteps(int64_t steps) {}

  // OK while the averager can average; once it cannot (its node's ranks could not re-form
  // after one died, say), the reason: the worker must stop training and leave.
  virtual absl::Status Health() const { return absl::OkStatus(); }

 private:
  struct Launched;  // the defaults' round: its snapshot, result, step and status
  std::shared_ptr<Launched> launched_;
};

}  // namespace localsgd

#endif  // LOCALSGD_WORKER_PARAMETER_AVERAGER_H_
