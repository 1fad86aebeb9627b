#ifndef LOCALSGD_COORDINATOR_EVENT_LOG_H_
#define LOCALSGD_COORDINATOR_EVENT_LOG_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>

#include "absl/time/time.h"
#include "proto/localsgd/v1/coordinator.pb.h"

namespace localsgd {

// The latest events for status (docs/design.md, "Status"): at most `capacity`, oldest dropped
// first, each numbered from 1 in the order added. Texts longer than 1024 bytes are cut.
// Thread-compatible.
class EventLog {
 public:
  explicit EventLog(size_t capacity) : capacity_(capacity) {}

  // Adds an event and returns it as kept.
  const v1::Event& Add(absl::Time time, v1::EventSeverity severity, std::string kind,
                       std::string worker_id, std::string run_id, std::string text);

  // Oldest first.
  const std::deque<v1::Event>& events() const { return events_; }
  // Events added since the start, kept or not.
  int64_t added() const { return added_; }

 private:
  const size_t capacity_;
  std::deque<v1::Event> events_;
  int64_t added_ = 0;
};

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_EVENT_LOG_H_
