#include "coordinator/round_backoff.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace localsgd {

std::optional<std::string> RoundBackoff::Aborted(absl::Time now, const std::string& membership,
                                                 const std::string& reason) {
  const bool was_open = MayOpen(now, membership);
  // Aborts with other members count from the first again.
  if (membership != membership_) aborts_ = 0;
  ++aborts_;
  membership_ = membership;
  reason_ = reason;
  until_ = absl::InfinitePast();
  if (aborts_ < options_.free_aborts) return std::nullopt;
  absl::Duration wait = options_.first;
  for (int i = options_.free_aborts; i < aborts_ && wait < options_.longest; ++i) wait *= 2;
  until_ = now + std::min(wait, options_.longest);
  std::string why;
  if (!was_open || MayOpen(now, membership, &why)) return std::nullopt;
  return why;
}

bool RoundBackoff::MayOpen(absl::Time now, const std::string& membership, std::string* why) const {
  if (now >= until_ || membership != membership_) return true;
  if (why != nullptr) {
    *why = absl::StrCat("rounds back off for ", absl::FormatDuration(until_ - now), " after ",
                        aborts_, " aborted in a row with the same members (last: ", reason_,
                        "); a commit or a change of members ends it");
  }
  return false;
}

}  // namespace localsgd
