#include "coordinator/round_sessions.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace localsgd {
namespace {

// Single-threaded: RoundSessions is used under one lock.
class FakeStream : public RoundMember {
 public:
  void Enqueue(std::shared_ptr<const v1::SyncResponse> message) override {
    if (!closed) messages.push_back(*message);
  }
  void Close(const absl::Status& status) override {
    if (!closed) end = status;
    closed = true;
  }
  void Flush() override { ++flushes; }
  void Cancel() override {
    cancelled = true;
    closed = true;
  }

  std::vector<v1::SyncResponse> messages;
  bool closed = false;
  bool cancelled = false;
  absl::Status end;
  int flushes = 0;
};

TEST(RoundSessionsTest, SessionsAreNamedByIdInTheOrderAddedAndNeverReused) {
  RoundSessions sessions;
  auto a = std::make_shared<FakeStream>();
  auto b = std::make_shared<FakeStream>();
  const int64_t first = sessions.Add("node-a", a);
  const int64_t second = sessions.Add("node-b", b);
  EXPECT_EQ(sessions.Ids(), (std::vector<int64_t>{first, second}));
  EXPECT_EQ(sessions.MemberOf(second), "node-b");
  EXPECT_EQ(sessions.SessionOf("node-a"), first);
  EXPECT_EQ(sessions.SessionOf("node-c"), -1);
  EXPECT_NE(sessions.Scratch(first), sessions.Scratch(second));

  sessions.End(first, absl::AbortedError("dropped"));
  EXPECT_TRUE(a->closed);
  EXPECT_TRUE(absl::IsAborted(a->end));
  EXPECT_FALSE(sessions.Contains(first));
  EXPECT_EQ(sessions.MemberOf(first), "");
  EXPECT_EQ(sessions.Scratch(first), nullptr);
  EXPECT_FALSE(sessions.Send(first, std::make_shared<v1::SyncResponse>()));
  const int64_t third = sessions.Add("node-a", a);
  EXPECT_GT(third, second);
}

TEST(RoundSessionsTest, WhatIsSentOrEndedIsFlushedOnceAfterTheLock) {
  RoundSessions sessions;
  auto a = std::make_shared<FakeStream>();
  const int64_t id = sessions.Add("node-a", a);
  EXPECT_TRUE(sessions.Send(id, std::make_shared<v1::SyncResponse>()));
  EXPECT_TRUE(sessions.Send(id, std::make_shared<v1::SyncResponse>()));
  EXPECT_EQ(a->messages.size(), 2u);
  EXPECT_EQ(a->flushes, 0);  // nothing is flushed under the lock
  TouchedStreams<RoundMember>::Flush(sessions.TakeTouched());
  EXPECT_EQ(a->flushes, 1);  // once, however often it was touched
  EXPECT_TRUE(sessions.TakeTouched().empty());
}

TEST(RoundSessionsTest, TakeAllHandsBackOpenStreamsAndEmptiesTheTable) {
  RoundSessions sessions;
  auto a = std::make_shared<FakeStream>();
  auto b = std::make_shared<FakeStream>();
  sessions.Add("node-a", a);
  sessions.Add("node-b", b);
  const std::vector<std::shared_ptr<RoundMember>> taken = sessions.TakeAll();
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_FALSE(a->closed);  // a commit answers them before they close
  EXPECT_TRUE(sessions.Ids().empty());
  EXPECT_EQ(sessions.SessionOf("node-a"), -1);
}

TEST(RoundSessionsTest, AMembersNewerStreamCancelsItsEarlierOne) {
  RoundSessions sessions;
  auto old_stream = std::make_shared<FakeStream>();
  auto new_stream = std::make_shared<FakeStream>();
  auto other = std::make_shared<FakeStream>();
  sessions.Supersede("node-a", old_stream);
  sessions.Supersede("node-b", other);
  sessions.Supersede("node-a", old_stream);  // the same stream again: nothing happens
  EXPECT_FALSE(old_stream->cancelled);
  sessions.Supersede("node-a", new_stream);
  EXPECT_TRUE(old_stream->cancelled);
  EXPECT_FALSE(new_stream->cancelled);
  EXPECT_FALSE(other->cancelled);
  TouchedStreams<RoundMember>::Flush(sessions.TakeTouched());
  EXPECT_EQ(old_stream->flushes, 1);  // the cancellation goes out after the lock

  // A new run forgets the latest streams: a stream of the earlier run is not cancelled.
  sessions.ForgetLatest();
  sessions.Supersede("node-a", std::make_shared<FakeStream>());
  EXPECT_FALSE(new_stream->cancelled);
}

}  // namespace
}  // namespace localsgd
