#ifndef LOCALSGD_WORKER_INTRA_NODE_AVERAGER_H_
#define LOCALSGD_WORKER_INTRA_NODE_AVERAGER_H_

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace localsgd {

// Averaging among the ranks of one node: single rank (nothing to do), Gloo on CPU, NCCL on
// GPU (under --config=cuda). Every rank of the node calls each method in the same order.
// Not thread-safe.
class IntraNodeAverager {
 public:
  virtual ~IntraNodeAverager() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Replaces `flat` (a contiguous float tensor) with its mean over the node's ranks.
  virtual absl::Status AllReduceMean(at::Tensor& flat) = 0;
  // Replaces `flat` on every rank with rank 0's.
  virtual absl::Status Broadcast(at::Tensor& flat) = 0;
};

// For a node with one rank.
std::unique_ptr<IntraNodeAverager> MakeSingleRankAverager();

// c10d's ProcessGroupGloo over loopback, meeting through a node-local file store at
// `store_path` (the same path on every rank of the node; unique per run and node).
absl::StatusOr<std::unique_ptr<IntraNodeAverager>> MakeGlooAverager(const std::string& store_path,
                                                                    int rank, int size,
                                                                    absl::Duration timeout);

// NCCL on GPU `device` (ncclAvg all-reduce, broadcast from rank 0) for tensors on that device;
// the ranks exchange the NCCL unique id through a node-local file store at `store_path`.
// NCCL collectives do not fail when a peer dies, they wait: while one runs, this polls NCCL's
// asynchronous error and `peers_alive` (every 100 ms), and on either aborts the communicator
// and returns UNAVAILABLE (the averager is then unusable; the node re-forms). Built only with
// --config=cuda; otherwise UNIMPLEMENTED. FAILED_PRECONDITION when the device does not exist.
absl::StatusOr<std::unique_ptr<IntraNodeAverager>> MakeNcclAverager(
    const std::string& store_path, int rank, int size, int device, absl::Duration timeout,
    std::function<bool()> peers_alive = [] { return true; });

}  // namespace localsgd

#endif  // LOCALSGD_WORKER_INTRA_NODE_AVERAGER_H_
