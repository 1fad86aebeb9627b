#include "coordinator/round_grace.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace localsgd {

RoundGrace RoundGrace::Of(const v1::RunSpec& spec) {
  return RoundGrace(absl::Seconds(spec.round_grace_seconds()), spec.round_quorum_fraction());
}

int RoundGrace::Quorum(int expected) const {
  return std::max(1, static_cast<int>(std::ceil(quorum_fraction_ * expected - 1e-9)));
}

absl::Time RoundGrace::Ends(std::vector<absl::Time> arrivals, int expected) const {
  const size_t quorum = static_cast<size_t>(Quorum(expected));
  if (grace_ <= absl::ZeroDuration() || arrivals.size() < quorum) return absl::InfiniteFuture();
  std::nth_element(arrivals.begin(), arrivals.begin() + static_cast<ptrdiff_t>(quorum - 1),
                   arrivals.end());
  return arrivals[quorum - 1] + grace_;
}

std::string RoundGrace::Reason(int expected) const {
  return absl::StrCat("did not arrive within the grace window (", absl::FormatDuration(grace_),
                      " after ", Quorum(expected), " of ", expected, " members)");
}

}  // namespace localsgd
