#include "coordinator/run_verdict.h"

#include <algorithm>
#include <cmath>

namespace localsgd {

RunVerdict JudgeRun(const std::vector<Member>& members, int min_workers) {
  if (members.empty()) return {};
  if (std::all_of(members.begin(), members.end(),
                  [](const Member& m) { return !std::isfinite(m.loss); })) {
    return {RunVerdict::Kind::kDiverged,
            "every worker reports a non-finite training loss (NaN or infinity): training "
            "diverged (lower optimizer.lr, or check the data)"};
  }
  if (std::all_of(members.begin(), members.end(), [](const Member& m) { return m.finished; }) &&
      static_cast<int>(members.size()) >= min_workers) {
    return {RunVerdict::Kind::kCompleted, "every worker finished training"};
  }
  return {};
}

}  // namespace localsgd
