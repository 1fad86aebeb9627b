#ifndef LOCALSGD_COORDINATOR_STATUS_RENDER_H_
#define LOCALSGD_COORDINATOR_STATUS_RENDER_H_

#include <google/protobuf/message.h>

#include <string>

#include "absl/strings/string_view.h"
#include "coordinator/process_metrics.h"
#include "proto/localsgd/v1/coordinator.pb.h"

namespace localsgd {

// A message as JSON (proto field names, every field printed, enums by name, 64-bit integers
// as strings).
std::string ProtoToJson(const google::protobuf::Message& message);

// `text` as a JSON string literal, quotes included.
std::string JsonString(absl::string_view text);

// The status snapshot as JSON.
std::string StatusToJson(const v1::CoordinatorStatus& status);

// The status snapshot in Prometheus' text exposition format (metrics named localsgd_*), with
// the process_* metrics when `process` is given.
std::string StatusToPrometheus(const v1::CoordinatorStatus& status,
                               const ProcessStats* process = nullptr);

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_STATUS_RENDER_H_
