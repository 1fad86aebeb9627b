#ifndef LOCALSGD_WORKER_MEMBERS_BEHIND_H_
#define LOCALSGD_WORKER_MEMBERS_BEHIND_H_

#include <string>

#include "proto/localsgd/v1/coordinator.pb.h"

namespace localsgd {

// Whether the ended run `run` (as the coordinator last said) has a member other than `self`
// that has not left and reports fewer optimizer steps than the run's global step: a node that
// the last round committed without (the grace window left it out, or it was a round behind),
// which takes the run's final model from the node leaders that hold it (docs/design.md,
// "Paced rounds"). False while the run is running.
bool MembersBehind(const v1::RunInfo& run, const std::string& self);

}  // namespace localsgd

#endif  // LOCALSGD_WORKER_MEMBERS_BEHIND_H_
