#ifndef LOCALSGD_COORDINATOR_STATUS_WATCH_H_
#define LOCALSGD_COORDINATOR_STATUS_WATCH_H_

#include <grpcpp/support/server_callback.h>

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "common/mutex.h"
#include "coordinator/control_plane.h"
#include "proto/localsgd/v1/coordinator.pb.h"

namespace localsgd {

class StatusWatchHub;

// One WatchStatus stream: a callback-API write reactor that sends the snapshots its hub
// offers, at most one write in flight and no more often than its interval. It never blocks a
// gRPC thread. Thread-safe.
class StatusWatcher : public grpc::ServerWriteReactor<v1::CoordinatorStatus> {
 public:
  explicit StatusWatcher(absl::Duration min_interval) : min_interval_(min_interval) {}

  // Starts writing `snapshot` unless a write is in flight, it is not newer than the last one
  // sent, or the interval has not passed. Called by the hub's thread.
  void Offer(const std::shared_ptr<const v1::CoordinatorStatus>& snapshot, absl::Time now);

  // Finishes the stream with `status` (after the write in flight, if any).
  void End(const grpc::Status& status);

  // True once gRPC is done with this reactor; the hub then deletes it.
  bool done() const;

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  void FinishLocked(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const absl::Duration min_interval_;
  mutable Mutex mu_;
  std::shared_ptr<const v1::CoordinatorStatus> in_flight_ ABSL_GUARDED_BY(mu_);
  int64_t last_version_ ABSL_GUARDED_BY(mu_) = -1;
  absl::Time last_sent_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool finish_wanted_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status finish_status_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

// Owns the WatchStatus streams: one thread waits for control-plane changes and offers fresh
// snapshots to every watcher, and deletes watchers gRPC is done with. Thread-safe.
class StatusWatchHub {
 public:
  StatusWatchHub(ControlPlane* plane, std::function<absl::Time()> clock);
  ~StatusWatchHub();

  // Registers a new stream; it receives its first snapshot at once.
  StatusWatcher* Add(absl::Duration min_interval);

  // Finishes every stream with `status` and refuses new ones with it.
  void EndAll(const grpc::Status& status);

  int size() const;

 private:
  void Loop();

  ControlPlane* const plane_;
  const std::function<absl::Time()> clock_;
  mutable Mutex mu_;
  std::vector<StatusWatcher*> watchers_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status end_status_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace localsgd

#endif  // LOCALSGD_COORDINATOR_STATUS_WATCH_H_
