#include "worker/session.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "absl/time/clock.h"

namespace localsgd {
namespace {

using ::testing::HasSubstr;

// Join refuses options that cannot make a member at once, naming the field, before it tries to
// reach any coordinator.
TEST(SessionTest, JoinNamesTheFieldOfBadOptions) {
  const auto refused = [](SessionOptions options, const std::string& field) {
    absl::StatusOr<std::unique_ptr<Session>> session = Session::Join(std::move(options));
    ASSERT_TRUE(absl::IsInvalidArgument(session.status())) << session.status();
    EXPECT_THAT(session.status().message(), HasSubstr(field));
  };
  SessionOptions ranks;
  ranks.local_world_size = 2;
  ranks.local_rank = 2;
  refused(ranks, "local_rank");
  SessionOptions world;
  world.local_world_size = 2;
  world.world_size = 1;
  refused(world, "world_size");
  SessionOptions tls;
  tls.data_tls_cert = "cert.pem";
  refused(tls, "data_tls_key");
  SessionOptions address;
  address.coordinator = "no-port-here";
  refused(address, "coordinator");
  address.coordinator = "127.0.0.1:0";
  refused(address, "names no port");
}

// A stop while the coordinator is unreachable ends the join soon with CANCELLED, not after
// the connect timeout.
TEST(SessionTest, AStopEndsTheJoinWhileTheCoordinatorIsUnreachable) {
  SessionOptions options;
  options.coordinator = "127.0.0.1:1";  // nothing listens there
  options.connect_timeout = absl::Minutes(5);
  std::atomic<bool> stop{false};
  options.stop = [&] { return stop.load(); };
  const absl::Time start = absl::Now();
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(300));
    stop = true;
  });
  absl::StatusOr<std::unique_ptr<Session>> session = Session::Join(std::move(options));
  stopper.join();
  EXPECT_TRUE(absl::IsCancelled(session.status())) << session.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
}

}  // namespace
}  // namespace localsgd
