#ifndef LOCALSGD_COMMON_LOG_H_
#define LOCALSGD_COMMON_LOG_H_

#include "absl/strings/string_view.h"

namespace localsgd {

// Writes one timestamped line ("2026-11-29T15:44:52.123Z I message") to stderr.
// Thread-safe: each line is written with a single call.
void LogInfo(absl::string_view message);
void LogWarning(absl::string_view message);
void LogError(absl::string_view message);

}  // namespace localsgd

#endif  // LOCALSGD_COMMON_LOG_H_
