// MakeNcclAverager in builds without --config=cuda.
#include "worker/intra_node_averager.h"

namespace localsgd {

absl::StatusOr<std::unique_ptr<IntraNodeAverager>> MakeNcclAverager(const std::string&, int, int,
                                                                    int, absl::Duration,
                                                                    std::function<bool()>) {
  return absl::UnimplementedError(
      "this worker was built without NCCL: build with --config=cuda (see docs/reference.md, GPUs)");
}

}  // namespace localsgd
