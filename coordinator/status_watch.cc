#include "coordinator/status_watch.h"

#include <algorithm>
#include <utility>

#include "common/status_util.h"

namespace localsgd {
namespace {

// How often the hub looks at the watchers when nothing changes (interval-delayed snapshots,
// finished streams), and the oldest a cached snapshot may get (heartbeat ages move on).
constexpr absl::Duration kPollInterval = absl::Milliseconds(50);
constexpr absl::Duration kMaxSnapshotAge = absl::Seconds(1);

}  // namespace

void StatusWatcher::Offer(const std::shared_ptr<const v1::CoordinatorStatus>& snapshot,
                          absl::Time now) {
  {
    MutexLock lock(&mu_);
    if (finish_wanted_ || finished_ || in_flight_ != nullptr) return;
    if (snapshot->version() <= last_version_) return;
    if (now - last_sent_ < min_interval_) return;
    in_flight_ = snapshot;
    last_version_ = snapshot->version();
    last_sent_ = now;
  }
  // Outside the lock: gRPC may run OnWriteDone inline.
  StartWrite(snapshot.get());
}

void StatusWatcher::End(const grpc::Status& status) {
  MutexLock lock(&mu_);
  if (finish_wanted_ || finished_) return;
  finish_wanted_ = true;
  finish_status_ = status;
  if (in_flight_ == nullptr) FinishLocked(status);
}

bool StatusWatcher::done() const {
  MutexLock lock(&mu_);
  return done_;
}

void StatusWatcher::OnWriteDone(bool ok) {
  MutexLock lock(&mu_);
  in_flight_ = nullptr;
  if (!ok && !finish_wanted_) {
    finish_wanted_ = true;
    finish_status_ = ToGrpcStatus(absl::UnavailableError("write failed"));
  }
  if (finish_wanted_) FinishLocked(finish_status_);
}

void StatusWatcher::OnCancel() { End(grpc::Status::CANCELLED); }

void StatusWatcher::OnDone() {
  MutexLock lock(&mu_);
  done_ = true;
}

void StatusWatcher::FinishLocked(const grpc::Status& status) {
  if (finished_) return;
  finished_ = true;
  Finish(status);
}

StatusWatchHub::StatusWatchHub(ControlPlane* plane, std::function<absl::Time()> clock)
    : plane_(plane), clock_(std::move(clock)), thread_([this] { Loop(); }) {}

StatusWatchHub::~StatusWatchHub() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
  MutexLock lock(&mu_);
  // Streams gRPC still holds (only if the server was not shut down first) are left to it.
  for (StatusWatcher* watcher : watchers_) {
    if (watcher->done()) delete watcher;
  }
}

StatusWatcher* StatusWatchHub::Add(absl::Duration min_interval) {
  auto* watcher = new StatusWatcher(min_interval);
  MutexLock lock(&mu_);
  if (ended_) {
    watcher->End(end_status_);
  }
  watchers_.push_back(watcher);
  return watcher;
}

void StatusWatchHub::EndAll(const grpc::Status& status) {
  // Under the lock: the hub's thread deletes watchers gRPC is done with (a cancelled stream's
  // may be done already), and it does so only under this lock. End never waits on gRPC.
  MutexLock lock(&mu_);
  ended_ = true;
  end_status_ = status;
  for (StatusWatcher* watcher : watchers_) watcher->End(status);
}

int StatusWatchHub::size() const {
  MutexLock lock(&mu_);
  return static_cast<int>(watchers_.size());
}

void StatusWatchHub::Loop() {
  std::shared_ptr<const v1::CoordinatorStatus> snapshot;
  absl::Time snapshot_time = absl::InfinitePast();
  int64_t seen = 0;
  while (true) {
    std::vector<StatusWatcher*> watchers;
    {
      MutexLock lock(&mu_);
      if (stop_) return;
      // Only this thread removes (and deletes) watchers, so the copies stay valid below.
      auto done = std::stable_partition(watchers_.begin(), watchers_.end(),
                                        [](StatusWatcher* w) { return !w->done(); });
      for (auto it = done; it != watchers_.end(); ++it) delete *it;
      watchers_.erase(done, watchers_.end());
      watchers = watchers_;
    }
    if (!watchers.empty()) {
      absl::Time now = clock_();
      int64_t version = plane_->version();
      if (snapshot == nullptr || version != snapshot->version() ||
          now - snapshot_time > kMaxSnapshotAge) {
        snapshot = std::make_shared<const v1::CoordinatorStatus>(plane_->Status());
        snapshot_time = now;
      }
      for (StatusWatcher* watcher : watchers) watcher->Offer(snapshot, now);
    }
    seen = plane_->AwaitChange(seen, kPollInterval);
  }
}

}  // namespace localsgd
