#include "coordinator/round_step.h"

#include <algorithm>

namespace localsgd {

int64_t RoundStep(std::vector<int64_t> claims, int64_t floor) {
  if (claims.empty()) return floor;
  const auto median = claims.begin() + static_cast<std::ptrdiff_t>(claims.size() / 2);
  std::nth_element(claims.begin(), median, claims.end());
  return std::max(floor, *median);
}

}  // namespace localsgd
