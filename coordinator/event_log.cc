#include "coordinator/event_log.h"

#include <utility>

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
                               std::string worker_id, std::string run_id, std::string text) {
  constexpr size_t kMaxText = 1024;
  v1::Event event;
  event.set_sequence(++added_);
  *event.mutable_time() = ToProtoTime(time);
  event.set_severity(severity);
  event.set_kind(std::move(kind));
  event.set_worker_id(std::move(worker_id));
  event.set_run_id(std::move(run_id));
  event.set_text(Cut(std::move(text), kMaxText));
  events_.push_back(std::move(event));
  while (events_.size() > capacity_) events_.pop_front();
  return events_.back();
}

}  // namespace localsgd
