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
