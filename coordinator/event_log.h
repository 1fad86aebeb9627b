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
// first, each numbered from 1 in the order added. Texts longer than 1024 bytes are cut. An
// event with a `cause` that one of the last kFoldWindow events shares (with its kind, worker
// and run) is folded into it: that one moves to the end with the new sequence, time and
// text, and counts it (Event.times). Thread-compatible.
class EventLog {
 public:
  explicit EventLog(size_t capacity) : capacity_(capacity) {}

  static constexpr size_t kFoldWindow = 16;

  // Adds an event (folded as above when `cause` is not empty) and returns it as kept.
  const v1::Event& Add(absl::Time time, v1::EventSeverity severity, std::string kind,
                       std::string worker_id, std::string run_id, std::string text,
                       const std::string& cause = "");

  // Oldest first.
  const std::deque<v1::Event>& events() const { return events_; }
  // Events added since the start, kept or not.
  int64_t added() const { return added_; }

 private:
  const size_t capacity_;
  std::deque<v1::Event> events_;
  std::deque<std::string> causes_;  // by event
  int64_t added_ = 0;
};

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_EVENT_LOG_H_
