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
// two members it is the largest claim (docs/design.md, "Faults"). Nor past `ceiling` (when
// above 0): no honest member is further ahead of the last commit (StepCeiling).
int64_t RoundStep(std::vector<int64_t> claims, int64_t floor, int64_t ceiling = 0);

// The most a round can move the global step past `floor`, the step of the last commit, under a
// run's bound on unsynchronised training (RunSpec.max_unsynced_steps; 0: none, and no
// ceiling): a node trains at most that many steps past the last round it took, plus the
// boundary it stops at and a move into the others' fragment phase (local_sgd_steps each).
// Returns the ceiling for RoundStep, 0 for none.
int64_t StepCeiling(int64_t floor, int64_t max_unsynced_steps, int64_t local_sgd_steps);

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_ROUND_STEP_H_
