#include "coordinator/status_watch.h"

#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace localsgd {
namespace {

// The watchers here are never bound to a gRPC stream: gRPC keeps what an unbound reactor asks
// for (a write, a finish) until it is bound, and a test stands in for gRPC by calling OnDone.

std::unique_ptr<ControlPlane> MakePlane() {
  auto plane = ControlPlane::Create(ControlPlane::Options{});
  EXPECT_TRUE(plane.ok()) << plane.status();
  return std::move(*plane);
}

// Waits (up to 5 s) until the hub's thread has deleted every watcher gRPC is done with.
bool AwaitSize(const StatusWatchHub& hub, int size) {
  absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (hub.size() != size) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

TEST(StatusWatchHubTest, DeletesWatchersGrpcIsDoneWith) {
  auto plane = MakePlane();
  StatusWatchHub hub(plane.get(), [] { return absl::Now(); });
  StatusWatcher* first = hub.Add(absl::ZeroDuration());
  StatusWatcher* second = hub.Add(absl::ZeroDuration());
  EXPECT_EQ(hub.size(), 2);
  EXPECT_FALSE(first->done());
  first->OnDone();
  EXPECT_TRUE(AwaitSize(hub, 1));
  EXPECT_FALSE(second->done());
  second->OnDone();
  EXPECT_TRUE(AwaitSize(hub, 0));
}

TEST(StatusWatchHubTest, AStreamOpenedAfterEndAllIsEndedAndStillDeleted) {
  auto plane = MakePlane();
  StatusWatchHub hub(plane.get(), [] { return absl::Now(); });
  hub.EndAll(grpc::Status(grpc::StatusCode::UNAVAILABLE, "shutting down"));
  StatusWatcher* late = hub.Add(absl::ZeroDuration());
  EXPECT_EQ(hub.size(), 1);
  late->OnDone();
  EXPECT_TRUE(AwaitSize(hub, 0));
}

// EndAll while the hub's thread deletes the streams gRPC is done with (cancelled ones right
// before a shutdown): no stream may be ended after it is deleted. The change to the control
// plane wakes the hub's thread as EndAll starts; AddressSanitizer caught the race in CI.
TEST(StatusWatchHubTest, EndAllRacesSafelyWithDeletingDoneWatchers) {
  for (int trial = 0; trial < 100; ++trial) {
    auto plane = MakePlane();
    StatusWatchHub hub(plane.get(), [] { return absl::Now(); });
    std::vector<StatusWatcher*> watchers;
    for (int i = 0; i < 200; ++i) watchers.push_back(hub.Add(absl::ZeroDuration()));
    for (StatusWatcher* watcher : watchers) watcher->OnDone();
    plane->Drain();
    hub.EndAll(grpc::Status(grpc::StatusCode::UNAVAILABLE, "shutting down"));
    EXPECT_TRUE(AwaitSize(hub, 0));
  }
}

}  // namespace
}  // namespace localsgd
