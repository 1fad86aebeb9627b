#include "coordinator/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace localsgd {

absl::StatusOr<ProcessStats> ReadProcessStats() {
  std::ifstream stat_file("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  // Fields after the command name, which is in parentheses and may hold spaces.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return absl::UnavailableError("cannot read /proc/self/stat");
  std::vector<std::string> fields = absl::StrSplit(stat.substr(close + 2), ' ', absl::SkipEmpty());
  // fields[0] is field 3 (state) of proc(5): utime is 14, stime 15, starttime 22, vsize 23,
  // rss 24.
  auto field = [&](int number) -> double {
    double value = 0;
    const size_t index = static_cast<size_t>(number - 3);
    if (index < fields.size()) (void)absl::SimpleAtod(fields[index], &value);
    return value;
  };
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  ProcessStats stats;
  stats.cpu_seconds = (field(14) + field(15)) / ticks;
  stats.virtual_bytes = field(23);
  stats.resident_bytes = field(24) * page;
  std::ifstream boot_file("/proc/stat");
  std::string line;
  while (std::getline(boot_file, line)) {
    double boot = 0;
    if (line.rfind("btime ", 0) == 0 && absl::SimpleAtod(line.substr(6), &boot)) {
      stats.start_time_seconds = boot + field(22) / ticks;
    }
  }
  if (DIR* dir = opendir("/proc/self/fd"); dir != nullptr) {
    while (dirent* entry = readdir(dir)) {
      if (entry->d_name[0] != '.') ++stats.open_fds;
    }
    closedir(dir);
    --stats.open_fds;  // the directory stream's own
  }
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0) stats.max_fds = static_cast<int64_t>(limit.rlim_cur);
  return stats;
}

}  // namespace localsgd
