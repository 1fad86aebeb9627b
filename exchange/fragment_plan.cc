#include "exchange/fragment_plan.h"

#include "absl/strings/str_cat.h"

namespace localsgd {

absl::StatusOr<FragmentPlan> FragmentPlan::Make(const ChunkLayout& layout, int fragments) {
  const int chunks = layout.num_chunks();
  if (fragments < 1 || fragments > chunks) {
    return absl::InvalidArgumentError(
        absl::StrCat("fragments: ", fragments, " needs as many chunks, and the model has ", chunks,
                     " of ", layout.chunk_values, " values (", layout.num_values,
                     " values in all); lower fragments or chunk_bytes"));
  }
  FragmentPlan plan;
  plan.begin_.clear();
  for (int f = 0; f < fragments; ++f) {
    plan.begin_.push_back(layout.begin(static_cast<int>(int64_t{f} * chunks / fragments)));
  }
  plan.begin_.push_back(layout.num_values);
  return plan;
}

}  // namespace localsgd
