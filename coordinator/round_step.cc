#include "coordinator/round_step.h"

#include <algorithm>

namespace localsgd {

int64_t RoundStep(std::vector<int64_t> claims, int64_t floor, int64_t ceiling) {
  if (claims.empty()) return floor;
  const auto median = claims.begin() + static_cast<std::ptrdiff_t>(claims.size() / 2);
  std::nth_element(claims.begin(), median, claims.end());
  const int64_t step = std::max(floor, *median);
  return ceiling > 0 ? std::min(step, std::max(floor, ceiling)) : step;
}

int64_t StepCeiling(int64_t floor, int64_t max_unsynced_steps, int64_t local_sgd_steps) {
  if (max_unsynced_steps <= 0) return 0;
  return floor + max_unsynced_steps + 2 * std::max<int64_t>(local_sgd_steps, 1);
}

}  // namespace localsgd
