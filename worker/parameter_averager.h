#ifndef LOCALSGD_WORKER_PARAMETER_AVERAGER_H_
#define LOCALSGD_WORKER_PARAMETER_AVERAGER_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
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

  // Averages `tensors` (parameters, and buffers unless turned off) in place. `*step` is the
  // caller's optimizer step count; the averager may move it when the worker must take up
  // another step with the tensors it returns (its node re-formed after a rank died and goes
  // on from the node leader's step). On error (a round aborted, say) the tensors hold this
  // worker's own values, or its node's mean, and training goes on, unless Health() is an error.
  virtual absl::Status Average(const std::vector<at::Tensor>& tensors, int64_t* step) = 0;

  // OK while the averager can average; once it cannot (its node's ranks could not re-form
  // after one died, say), the reason: the worker must stop training and leave.
  virtual absl::Status Health() const { return absl::OkStatus(); }
};

}  // namespace localsgd

#endif  // LOCALSGD_WORKER_PARAMETER_AVERAGER_H_
