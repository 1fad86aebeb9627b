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

// Moves the values of `tensors` into one buffer, in their order, each tensor becoming a view of
// it (its data replaced in place: a module or optimizer that holds the tensor sees the same
// values), so that FlatView hands a round the model without a copy. Leaves them as they are
// unless every tensor is contiguous fp32 on one device.
void IntoOneBuffer(const std::vector<at::Tensor>& tensors);

// The values of `range` as one contiguous fp32 tensor: a view of the tensors' own values when
// they lie in one buffer in order (IntoOneBuffer), so that writing it writes them; otherwise
// a copy (Flatten).
at::Tensor FlatView(const std::vector<at::Tensor>& tensors, ValueRange range);

// Writes `flat` (range.size values, any device) into the values of `range`.
void Unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& tensors, ValueRange range);

// An overlapped round's merge (docs/design.md, "Overlapped rounds"): the values of `range`
// become result + (values - snapshot), i.e. the committed model plus the progress made since
// the snapshot. `result` and `snapshot` hold range.size values each.
void MergeRound(const at::Tensor& result, const at::Tensor& snapshot,
                const std::vector<at::Tensor>& tensors, ValueRange range);

}  // namespace localsgd

#endif  // LOCALSGD_WORKER_FLAT_MODEL_H_
