#ifndef LOCALSGD_COORDINATOR_STATUS_PAGE_H_
#define LOCALSGD_COORDINATOR_STATUS_PAGE_H_

#include <string>
#include <vector>

#include "proto/localsgd/v1/coordinator.pb.h"

namespace localsgd {

// What the status page shows: one status snapshot, the run history and the current run's
// series (empty when none is kept).
struct PageData {
  v1::CoordinatorStatus status;
  std::vector<v1::RunInfo> runs;
  v1::RunSeries series;
};

// The page's body, rendered on the server (docs/design.md, "Status"): run state and spec,
// progress with ETA, charts (loss, test accuracy, round time split into transfer and waiting,
// bytes per round) as inline SVG, members, events, recent rounds, past runs. Every number a
// test reads carries an id or a data- attribute.
std::string StatusPageBody(const PageData& data);

// The whole page: the body above, and a script that replaces the body with a fresh one
// (GET /ui/body) every second. Self-contained: no external script, style or font.
std::string StatusPage(const PageData& data);

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_STATUS_PAGE_H_
