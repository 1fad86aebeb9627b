#ifndef LOCALSGD_COORDINATOR_RUN_VERDICT_H_
#define LOCALSGD_COORDINATOR_RUN_VERDICT_H_

#include <string>
#include <vector>

#include "coordinator/membership.h"

namespace localsgd {

// What the live workers' latest reports say of a running run (docs/design.md, "Faults"): it
// diverged when every one reports a non-finite training loss, and it is complete when every
// one finished its training and they are at least `min_workers`. Otherwise it goes on. Pure.
struct RunVerdict {
  enum class Kind { kGoesOn, kDiverged, kCompleted };
  Kind kind = Kind::kGoesOn;
  std::string reason;  // for the run record, when it ends
};

RunVerdict JudgeRun(const std::vector<Member>& members, int min_workers);

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_RUN_VERDICT_H_
