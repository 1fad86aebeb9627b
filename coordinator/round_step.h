#ifndef LOCALSGD_COORDINATOR_ROUND_STEP_H_
#define LOCALSGD_COORDINATOR_ROUND_STEP_H_

#include <cstdint>
#include <vector>

namespace localsgd {

// The global step a committed round reaches, from the steps its included members claimed:
// their upper median, and at least `floor` (the global step before the round). Honest members
// claim the same step (each follows the global step after every sync, then trains to the
// next boundary), so the median is theirs; with three or more members no single one can
// push the global step ahead (ending a total_steps run early) or hold it back. With one or
// two members it is the largest claim (docs/design.md, "Faults").
int64_t RoundStep(std::vector<int64_t> claims, int64_t floor);

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_ROUND_STEP_H_
