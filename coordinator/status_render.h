#ifndef LOCALSGD_COORDINATOR_STATUS_RENDER_H_
#define LOCALSGD_COORDINATOR_STATUS_RENDER_H_

#include <string>

#include "proto/localsgd/v1/coordinator.pb.h"

namespace localsgd {

// The status snapshot as JSON (proto field names, every field printed, enums by name).
std::string StatusToJson(const v1::CoordinatorStatus& status);

// The status snapshot in Prometheus' text exposition format (metrics named localsgd_*).
std::string StatusToPrometheus(const v1::CoordinatorStatus& status);

// A self-contained HTML page that polls /status and shows run, rounds and members.
const std::string& StatusPageHtml();

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_STATUS_RENDER_H_
