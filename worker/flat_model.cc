#include "worker/flat_model.h"

#include <torch/types.h>

#include <algorithm>

namespace localsgd {
namespace {

// Calls visit(tensor's flat view slice, slice of the range) for each tensor that holds values
// of `range`, in order.
template <typename Visit>
void ForEachPiece(const std::vector<at::Tensor>& tensors, ValueRange range, Visit visit) {
  int64_t begin = 0;  // of the current tensor, in the flat vector
  const int64_t end = range.offset + range.size;
  for (const at::Tensor& t : tensors) {
    const int64_t n = t.numel();
    const int64_t lo = std::max(begin, range.offset);
    const int64_t hi = std::min(begin + n, end);
    if (lo < hi) visit(t, lo - begin, hi - lo, lo - range.offset);
    begin += n;
    if (begin >= end) break;
  }
}

// Whether `t` is contiguous fp32 on `first`'s device: what one buffer can hold.
bool FitsOneBuffer(const at::Tensor& t, const at::Tensor& first) {
  return t.scalar_type() == at::kFloat && t.is_contiguous() && t.device() == first.device();
}

// Whether `tensors` are views of one buffer, one after another from the first's start.
bool InOneBuffer(const std::vector<at::Tensor>& tensors) {
  if (tensors.empty()) return false;
  const at::Tensor& first = tensors.front();
  int64_t offset = first.storage_offset();
  for (const at::Tensor& t : tensors) {
    if (!FitsOneBuffer(t, first) || !t.storage().is_alias_of(first.storage()) ||
        t.storage_offset() != offset) {
      return false;
    }
    offset += t.numel();
  }
  return true;
}

}  // namespace

void IntoOneBuffer(const std::vector<at::Tensor>& tensors) {
  if (tensors.empty() || InOneBuffer(tensors)) return;
  for (const at::Tensor& t : tensors) {
    if (!FitsOneBuffer(t, tensors.front())) return;
  }
  at::NoGradGuard no_grad;
  const at::Tensor buffer = Flatten(tensors, WholeModel(tensors));
  int64_t offset = 0;
  for (const at::Tensor& t : tensors) {
    t.set_data(buffer.slice(0, offset, offset + t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

at::Tensor FlatView(const std::vector<at::Tensor>& tensors, ValueRange range) {
  if (!InOneBuffer(tensors)) return Flatten(tensors, range);
  const at::Tensor& first = tensors.front();
  return torch::empty({0}, torch::TensorOptions().dtype(torch::kFloat32).device(first.device()))
      .set_(first.storage(), first.storage_offset() + range.offset, {range.size}, {1});
}

ValueRange WholeModel(const std::vector<at::Tensor>& tensors) {
  int64_t n = 0;
  for (const at::Tensor& t : tensors) n += t.numel();
  return ValueRange{0, n};
}

at::Tensor Flatten(const std::vector<at::Tensor>& tensors, ValueRange range) {
  std::vector<at::Tensor> pieces;
  ForEachPiece(tensors, range, [&](const at::Tensor& t, int64_t at, int64_t n, int64_t) {
    pieces.push_back(t.detach().reshape({-1}).slice(0, at, at + n).to(torch::kFloat32));
  });
  if (pieces.empty()) {
    return torch::empty({0}, torch::TensorOptions()
                                 .dtype(torch::kFloat32)
                                 .device(tensors.empty() ? torch::kCPU : tensors.front().device()));
  }
  return torch::cat(pieces).contiguous();
}

void Unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& tensors, ValueRange range) {
  at::NoGradGuard no_grad;
  ForEachPiece(tensors, range, [&](const at::Tensor& t, int64_t at, int64_t n, int64_t from) {
    at::Tensor into = t.view({-1}).slice(0, at, at + n);
    const at::Tensor values = flat.slice(0, from, from + n);
    if (into.data_ptr() != values.data_ptr()) into.copy_(values);  // (a FlatView of them: done)
  });
}

void MergeRound(const at::Tensor& result, const at::Tensor& snapshot,
                const std::vector<at::Tensor>& tensors, ValueRange range) {
  at::NoGradGuard no_grad;
  const at::Tensor progress = Flatten(tensors, range) - snapshot.to(result.device());
  Unflatten(result + progress.to(result.device()), tensors, range);
}

}  // namespace localsgd
