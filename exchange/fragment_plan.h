#ifndef LOCALSGD_EXCHANGE_FRAGMENT_PLAN_H_
#define LOCALSGD_EXCHANGE_FRAGMENT_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "exchange/chunking.h"

namespace localsgd {

// Streaming fragments (RunSpec.fragments; docs/design.md, "Streaming fragments"): the flat
// vector cut into P runs of whole chunks, balanced by chunks (fragment f holds chunks
// [f C / P, (f + 1) C / P) of C); which fragment syncs when is RoundSchedule's. A fragment
// starts on a chunk boundary, so its chunks, counted from its first, are the vector's chunks.
// Plain value type, no network.
class FragmentPlan {
 public:
  // One fragment: the whole vector.
  FragmentPlan() = default;
  // INVALID_ARGUMENT naming `fragments` when `layout` has fewer chunks than that.
  static absl::StatusOr<FragmentPlan> Make(const ChunkLayout& layout, int fragments);

  int size() const { return static_cast<int>(begin_.size()) - 1; }
  // Fragment f is values [begin(f), begin(f) + values(f)) of the vector.
  int64_t begin(int f) const { return begin_[f]; }
  int64_t values(int f) const { return begin_[f + 1] - begin_[f]; }

 private:
  std::vector<int64_t> begin_ = {0, 0};  // P + 1 boundaries
};

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_FRAGMENT_PLAN_H_
