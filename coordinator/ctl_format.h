#ifndef LOCALSGD_COORDINATOR_CTL_FORMAT_H_
#define LOCALSGD_COORDINATOR_CTL_FORMAT_H_

#include <string>

#include "proto/localsgd/v1/coordinator.pb.h"

namespace localsgd {

// localsgdctl's readable views of the coordinator's status.

// One run in one line: "run-… (name) RUNNING round 3 step 24/1000".
std::string FormatRunLine(const v1::RunInfo& run);

// "42.0% (420/1000), elapsed 1m05s, ETA 1m30s": the run's progress.
std::string FormatProgress(const v1::CoordinatorStatus& status);

// The `status` command: the run, its progress and result, its main spec numbers, the latest
// events and a table of members.
std::string FormatStatusTable(const v1::CoordinatorStatus& status);

// One sync round: outcome, members, duration, bytes, codec and who was dropped.
std::string FormatRound(const v1::RoundRecord& round);

// The `watch` command: one line per snapshot with time, state, round, step, members, mean
// loss and total samples/s.
std::string FormatWatchLine(const v1::CoordinatorStatus& status);

// The `runs` command: one line per run, newest first.
std::string FormatRunsTable(const v1::ListRunsResponse& runs);

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_CTL_FORMAT_H_
