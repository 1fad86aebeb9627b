#include "common/log.h"

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace localsgd {
namespace {

void LogLine(char level, absl::string_view message) {
  std::string line =
      absl::StrCat(absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone()), " ",
                   std::string(1, level), " ", message, "\n");
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace

void LogInfo(absl::string_view message) { LogLine('I', message); }
void LogWarning(absl::string_view message) { LogLine('W', message); }
void LogError(absl::string_view message) { LogLine('E', message); }

}  // namespace localsgd
