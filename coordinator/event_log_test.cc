#include "coordinator/event_log.h"

#include <string>

#include "common/proto_time.h"
#include "gtest/gtest.h"

namespace localsgd {
namespace {

TEST(EventLogTest, KeepsTheLatestNumberedInOrder) {
  EventLog log(3);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  for (int i = 0; i < 5; ++i) {
    log.Add(t0 + absl::Seconds(i), v1::EVENT_SEVERITY_INFO, "worker_joined",
            "node-" + std::to_string(i) + "/0", "run-1", "joined");
  }
  ASSERT_EQ(log.events().size(), 3u);
  EXPECT_EQ(log.added(), 5);
  EXPECT_EQ(log.events().front().sequence(), 3);
  EXPECT_EQ(log.events().front().worker_id(), "node-2/0");
  EXPECT_EQ(log.events().back().sequence(), 5);
  EXPECT_EQ(FromProtoTime(log.events().back().time()), t0 + absl::Seconds(4));
  EXPECT_EQ(log.events().back().run_id(), "run-1");
}

// Issue 50, finding 6: rounds that could not commit aborted at every step, 2,243 in 20 s, and
// pushed every other event out of the log. Events with the same kind, worker and cause fold
// into one that counts them, even with other events between them.
TEST(EventLogTest, RepeatedEventsOfOneCauseFoldIntoOneThatCountsThem) {
  EventLog log(5);
  const absl::Time t0 = absl::FromUnixSeconds(3600);
  log.Add(t0, v1::EVENT_SEVERITY_INFO, "worker_joined", "a/0", "run-1", "a/0 joined");
  for (int round = 1; round <= 1000; ++round) {
    log.Add(t0 + absl::Seconds(round), v1::EVENT_SEVERITY_WARNING, "round_aborted", "", "run-1",
            "round " + std::to_string(round) + " aborted: quorum lost", "quorum lost");
    log.Add(t0 + absl::Seconds(round), v1::EVENT_SEVERITY_WARNING, "member_dropped", "b/0", "run-1",
            "dropped b/0: did not arrive", "did not arrive");
  }
  ASSERT_EQ(log.events().size(), 3u);
  EXPECT_EQ(log.events()[0].kind(), "worker_joined");  // still there
  const v1::Event& aborted = log.events()[1];
  EXPECT_EQ(aborted.kind(), "round_aborted");
  EXPECT_EQ(aborted.times(), 1000);
  EXPECT_EQ(aborted.text(), "round 1000 aborted: quorum lost (1000 times since 01:00:01 UTC)");
  EXPECT_EQ(FromProtoTime(aborted.first_time()), t0 + absl::Seconds(1));
  EXPECT_EQ(FromProtoTime(aborted.time()), t0 + absl::Seconds(1000));
  EXPECT_EQ(log.events()[2].times(), 1000);
  EXPECT_EQ(log.events()[2].sequence(), log.added());  // the latest number
  // Another cause, or no cause, is an event of its own.
  log.Add(t0, v1::EVENT_SEVERITY_WARNING, "round_aborted", "", "run-1", "round 1001 aborted: x",
          "x");
  log.Add(t0, v1::EVENT_SEVERITY_INFO, "worker_joined", "a/0", "run-1", "a/0 joined");
  EXPECT_EQ(log.events().back().times(), 1);
  EXPECT_EQ(log.events().size(), 5u);
}

TEST(EventLogTest, LongTextsAreCutOnACharacterBoundary) {
  EventLog log(1);
  // 2-byte characters: a cut at 1024 bytes falls between two of them, never inside one.
  std::string text;
  for (int i = 0; i < 600; ++i) text += "\xc3\xa9";
  const v1::Event& event =
      log.Add(absl::UnixEpoch(), v1::EVENT_SEVERITY_ERROR, "worker_failed", "w", "r", "x" + text);
  EXPECT_LE(event.text().size(), 1024u + 3);
  EXPECT_EQ(event.text().substr(event.text().size() - 3), "...");
  const std::string body = event.text().substr(1, event.text().size() - 4);
  EXPECT_EQ(body.size() % 2, 0u);
  EXPECT_EQ(body, text.substr(0, body.size()));
}

}  // namespace
}  // namespace localsgd
