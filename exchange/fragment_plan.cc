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

bool FragmentPlan::RoundAt(int64_t step, int local_sgd_steps, int fragments) {
  return step > 0 && step % (local_sgd_steps / fragments) == 0;
}

int FragmentPlan::FragmentAt(int64_t step, int local_sgd_steps, int fragments) {
  return static_cast<int>((step % local_sgd_steps) / (local_sgd_steps / fragments));
}

int64_t FragmentPlan::StepsToPhase(int64_t step, int local_sgd_steps, int fragments, int fragment) {
  if (fragment < 0 || fragment >= fragments) return 0;
  const int64_t stride = local_sgd_steps / fragments;
  const int at = FragmentAt(step, local_sgd_steps, fragments);
  return stride * ((fragment - at + fragments) % fragments);
}

}  // namespace localsgd
