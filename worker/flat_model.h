#ifndef LOCALSGD_WORKER_FLAT_MODEL_H_
#define LOCALSGD_WORKER_FLAT_MODEL_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace localsgd {

// A model's tensors seen as one flat vector of values, in the tensors' order (what rounds
// carry; docs/design.md, "One round, both modes"), and ranges of it: a round may carry a part
// of the model (a fragment) rather than all of it.
struct ValueRange {
  int64_t offset = 0;
  int64_t size = 0;
};

// Every value of `tensors`.
ValueRange WholeModel(const std::vector<at::Tensor>& tensors);

// The values of `range` as one new contiguous fp32 tensor on the tensors' device.
at::Tensor Flatten(const std::vector<at::Tensor>& tensors, ValueRange range);

// Writes `flat` (range.size values, any device) into the values of `range`.
void Unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& tensors, ValueRange range);

// An overlapped round's merge (docs/design.md, "Overlapped rounds"): the values of `range`
// become result + (values - snapshot), i.e. the committed model plus the progress made since
// the snapshot. `result` and `snapshot` hold range.size values each.
void MergeRound(const at::Tensor& result, const at::Tensor& snapshot,
                const std::vector<at::Tensor>& tensors, ValueRange range);

}  // namespace localsgd

#endif  // LOCALSGD_WORKER_FLAT_MODEL_H_
