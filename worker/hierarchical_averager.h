#ifndef LOCALSGD_WORKER_HIERARCHICAL_AVERAGER_H_
#define LOCALSGD_WORKER_HIERARCHICAL_AVERAGER_H_

#include <vector>

#include <ATen/core/Tensor.h>

#include "worker/intra_node_averager.h"
#include "worker/node_leader.h"
#include "worker/parameter_averager.h"

namespace localsgd {

// DESIGN.md §2 on one rank: the node's ranks average (Gloo/NCCL), the node leader syncs the
// node's mean with the coordinator, and broadcasts the result (global[r], or the node's mean
// when the round failed) to its ranks. Not thread-safe.
class HierarchicalAverager : public ParameterAverager {
 public:
  // `leader` is null on ranks other than 0. Both must outlive this object.
  HierarchicalAverager(IntraNodeAverager* intra, NodeLeader* leader);

  absl::Status Average(const std::vector<at::Tensor>& tensors, int64_t step) override;

  // Start of training: the leader offers global[0] and fetches the run's current global
  // model, every rank receives it; when the leader fails, every rank of the node returns an
  // error. Returns the run's global step at that model (0 for a new run; more for a node that
  // joins a run in progress, e.g. after a crash), the same on every rank of the node.
  absl::StatusOr<int64_t> Start(const std::vector<at::Tensor>& tensors);

 private:
  // Runs `leader_step` on the leader (if any) over the flattened tensors, then broadcasts.
  template <typename LeaderStep>
  absl::Status WithFlat(const std::vector<at::Tensor>& tensors, bool average_first,
                        LeaderStep leader_step);

  IntraNodeAverager* const intra_;
  NodeLeader* const leader_;
};

}  // namespace localsgd

#endif  // LOCALSGD_WORKER_HIERARCHICAL_AVERAGER_H_
