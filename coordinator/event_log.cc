#include "coordinator/event_log.h"

#include <algorithm>
#include <cstddef>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/proto_time.h"

namespace localsgd {
namespace {

// `text` cut to at most `limit` bytes on a UTF-8 character boundary, "..." added when cut.
std::string Cut(std::string text, size_t limit) {
  if (text.size() <= limit) return text;
  size_t end = limit;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  text.resize(end);
  return text + "...";
}

}  // namespace

const v1::Event& EventLog::Add(absl::Time time, v1::EventSeverity severity, std::string kind,
                               std::string worker_id, std::string run_id, std::string text,
                               const std::string& cause) {
  constexpr size_t kMaxText = 1024;
  v1::Event event;
  event.set_sequence(++added_);
  *event.mutable_time() = ToProtoTime(time);
  event.set_severity(severity);
  event.set_kind(std::move(kind));
  event.set_worker_id(std::move(worker_id));
  event.set_run_id(std::move(run_id));
  event.set_times(1);
  *event.mutable_first_time() = event.time();
  if (!cause.empty()) {
    for (size_t back = 1; back <= std::min(kFoldWindow, events_.size()); ++back) {
      const size_t i = events_.size() - back;
      const v1::Event& earlier = events_[i];
      if (causes_[i] != cause || earlier.kind() != event.kind() ||
          earlier.worker_id() != event.worker_id() || earlier.run_id() != event.run_id()) {
        continue;
      }
      event.set_times(earlier.times() + 1);
      *event.mutable_first_time() = earlier.first_time();
      text = absl::StrCat(
          text, " (", event.times(), " times since ",
          absl::FormatTime("%H:%M:%S", FromProtoTime(earlier.first_time()), absl::UTCTimeZone()),
          " UTC)");
      events_.erase(events_.begin() + static_cast<std::ptrdiff_t>(i));
      causes_.erase(causes_.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
  }
  event.set_text(Cut(std::move(text), kMaxText));
  events_.push_back(std::move(event));
  causes_.push_back(cause);
  while (events_.size() > capacity_) {
    events_.pop_front();
    causes_.pop_front();
  }
  return events_.back();
}

}  // namespace localsgd
