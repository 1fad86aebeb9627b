#include "exchange/stream_outbox.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace localsgd {
namespace {

// A stand-in reactor that records what the outbox asks of it.
struct FakeStream {
  std::vector<std::string> written;
  std::vector<bool> more;  // what the outbox said of each write: more queued behind it
  const std::string* in_flight = nullptr;
  int finishes = 0;
  int cancels = 0;
  grpc::Status finish_status;
  StreamOutbox<std::string> outbox{
      [this](const std::shared_ptr<const std::string>& m, bool more_behind) {
        EXPECT_EQ(in_flight, nullptr) << "two writes in flight";
        EXPECT_EQ(finishes, 0) << "write after finish";
        in_flight = m.get();
        more.push_back(more_behind);
      },
      [this](const grpc::Status& s) {
        EXPECT_EQ(in_flight, nullptr) << "finish during a write";
        ++finishes;
        finish_status = s;
      },
      [this] {
        ++cancels;
        // gRPC fails the write in flight, here on the cancelling thread.
        if (in_flight != nullptr) CompleteWrite(/*ok=*/false);
      }};
  void CompleteWrite(bool ok = true) {
    ASSERT_NE(in_flight, nullptr);
    written.push_back(*in_flight);
    in_flight = nullptr;
    outbox.OnWriteDone(ok);
  }
};

std::shared_ptr<const std::string> Msg(const char* s) {
  return std::make_shared<const std::string>(s);
}

TEST(StreamOutboxTest, WritesInOrderOneAtATimeThenFinishes) {
  FakeStream stream;
  stream.outbox.Enqueue(Msg("a"));
  stream.outbox.Enqueue(Msg("b"));
  stream.outbox.Close(grpc::Status::OK);
  stream.outbox.Enqueue(Msg("ignored after close"));
  stream.outbox.Flush();
  stream.outbox.Flush();  // a second flush while writing changes nothing
  stream.CompleteWrite();
  stream.CompleteWrite();
  EXPECT_EQ(stream.written, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(stream.more, (std::vector<bool>{true, false}));  // "b" was queued behind "a"
  EXPECT_EQ(stream.finishes, 1);
  EXPECT_TRUE(stream.finish_status.ok());
  stream.outbox.Flush();
  EXPECT_EQ(stream.finishes, 1);
}

// A reader that does not read: Cancel drops the queue, and the next Flush cancels the call,
// whose failed write lets the stream finish with Cancel's status.
TEST(StreamOutboxTest, CancelCancelsTheWriteInFlightAtTheNextFlushThenFinishes) {
  FakeStream stream;
  stream.outbox.Enqueue(Msg("a"));
  stream.outbox.Enqueue(Msg("b"));
  stream.outbox.Flush();  // "a" in flight, never completed by the reader
  stream.outbox.Cancel(grpc::Status(grpc::StatusCode::CANCELLED, "newer stream"));
  EXPECT_EQ(stream.cancels, 0);  // not under the caller's locks
  stream.outbox.Flush();
  EXPECT_EQ(stream.cancels, 1);
  EXPECT_EQ(stream.finishes, 1);
  EXPECT_EQ(stream.finish_status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(stream.written, (std::vector<std::string>{"a"}));  // "b" dropped
  stream.outbox.Flush();
  EXPECT_EQ(stream.cancels, 1);
}

TEST(StreamOutboxTest, CancelWithNothingInFlightFinishesWithoutCancellingTheCall) {
  FakeStream stream;
  stream.outbox.Enqueue(Msg("a"));
  stream.outbox.Cancel(grpc::Status(grpc::StatusCode::CANCELLED, "newer stream"));
  stream.outbox.Flush();
  EXPECT_EQ(stream.cancels, 0);
  EXPECT_EQ(stream.finishes, 1);
  EXPECT_TRUE(stream.written.empty());
}

// A stream closed after its last message (a commit), whose reader never read it: Cancel still
// ends it with Cancel's status, never with the Close's OK and without the message.
TEST(StreamOutboxTest, CancelAfterACloseWithMessagesQueuedFinishesCancelled) {
  FakeStream stream;
  stream.outbox.Enqueue(Msg("commit"));
  stream.outbox.Close(grpc::Status::OK);
  stream.outbox.Cancel(grpc::Status(grpc::StatusCode::CANCELLED, "newer stream"));
  stream.outbox.Flush();
  EXPECT_EQ(stream.finishes, 1);
  EXPECT_EQ(stream.finish_status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(stream.written.empty());
}

TEST(StreamOutboxTest, AbandonFinishesAfterTheWriteInFlight) {
  FakeStream stream;
  stream.outbox.Enqueue(Msg("a"));
  stream.outbox.Enqueue(Msg("b"));
  stream.outbox.Flush();
  stream.outbox.Abandon(grpc::Status::CANCELLED);
  EXPECT_EQ(stream.finishes, 0);
  stream.CompleteWrite();
  EXPECT_EQ(stream.written, std::vector<std::string>{"a"});
  EXPECT_EQ(stream.finishes, 1);
  EXPECT_EQ(stream.finish_status.error_code(), grpc::StatusCode::CANCELLED);
}

TEST(StreamOutboxTest, FailedWriteFinishesUnavailable) {
  FakeStream stream;
  stream.outbox.Enqueue(Msg("a"));
  stream.outbox.Enqueue(Msg("b"));
  stream.outbox.Flush();
  stream.CompleteWrite(/*ok=*/false);
  EXPECT_EQ(stream.finishes, 1);
  EXPECT_EQ(stream.finish_status.error_code(), grpc::StatusCode::UNAVAILABLE);
}

}  // namespace
}  // namespace localsgd
