#include "exchange/shard_owner.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "exchange/codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/status_matchers.h"

namespace localsgd {
namespace {

using ::localsgd::testing::IsOk;
using ::localsgd::testing::StatusIs;

constexpr int64_t kChunk = 256;

class FakeStream : public ReduceStream {
 public:
  void Enqueue(std::shared_ptr<const OwnerMean> message) override {
    if (!closed) sent.push_back(std::move(message));
  }
  void Close(const absl::Status& status) override {
    if (!closed) end = status;
    closed = true;
  }
  void Flush() override {}
  void Resume() override { ++resumed; }

  std::vector<std::shared_ptr<const OwnerMean>> sent;
  bool closed = false;
  absl::Status end;
  int resumed = 0;
};

class FakeSink : public OwnerFailureSink {
 public:
  void OnFailure(const absl::Status& status) override { failure = status; }
  absl::Status failure;
};

v1::ReduceHeader Header(const std::string& member, int64_t round = 3, uint64_t attempt = 77) {
  v1::ReduceHeader header;
  header.set_run_id("run-1");
  header.set_round(round);
  header.set_attempt(attempt);
  header.set_member_id(member);
  return header;
}

v1::Chunk Fp32Chunk(int index, float value, int64_t values = kChunk) {
  std::vector<float> data(static_cast<size_t>(values), value);
  v1::Chunk chunk;
  chunk.set_index(index);
  Encode(v1::CODEC_FP32, data, chunk.mutable_data());
  return chunk;
}

float FirstValue(const OwnerMean& mean) {
  float value;
  std::memcpy(&value, mean.message().mean().data().data(), sizeof(float));
  return value;
}

class ShardOwnerTest : public ::testing::Test {
 protected:
  // Members a (weight 1) and b (weight 3); this owner has chunks [1, 3) of a 4-chunk vector
  // whose last chunk is short.
  ShardOwner::Assignment Assignment() {
    ShardOwner::Assignment assignment;
    assignment.run_id = "run-1";
    assignment.round = 3;
    assignment.attempt = 77;
    assignment.members = {"a", "b"};
    assignment.weights = {1, 3};
    assignment.layout = ChunkLayout{4 * kChunk - 10, kChunk};
    assignment.begin_chunk = 1;
    assignment.end_chunk = 3;
    return assignment;
  }

  int64_t Attach(const std::string& member, const std::shared_ptr<FakeStream>& stream,
                 bool expect_waiting = false) {
    bool waiting = true;
    absl::StatusOr<int64_t> session = owner_.Attach(Header(member), stream, &waiting);
    EXPECT_THAT(session, IsOk());
    EXPECT_EQ(waiting, expect_waiting);
    return session.ok() ? *session : 0;
  }

  ShardOwner owner_;
  FakeSink sink_;
};

TEST_F(ShardOwnerTest, EachChunkIsAveragedOnceEveryMemberSentItAndGoesToEveryone) {
  ASSERT_THAT(owner_.Install(Assignment(), &sink_), IsOk());
  auto a = std::make_shared<FakeStream>();
  auto b = std::make_shared<FakeStream>();
  const int64_t sa = Attach("a", a);
  const int64_t sb = Attach("b", b);
  ASSERT_THAT(owner_.AddChunk(sa, Fp32Chunk(1, 1.0f)), IsOk());
  EXPECT_TRUE(a->sent.empty());
  ASSERT_THAT(owner_.AddChunk(sb, Fp32Chunk(1, 5.0f)), IsOk());
  ASSERT_EQ(a->sent.size(), 1u);
  ASSERT_EQ(b->sent.size(), 1u);
  EXPECT_EQ(a->sent[0], b->sent[0]);  // one message for everyone
  EXPECT_EQ(a->sent[0]->message().mean().index(), 1);
  EXPECT_FLOAT_EQ(FirstValue(*a->sent[0]), (1 * 1.0f + 3 * 5.0f) / 4);
  ASSERT_THAT(owner_.AddChunk(sa, Fp32Chunk(2, 2.0f)), IsOk());
  ASSERT_THAT(owner_.AddChunk(sb, Fp32Chunk(2, 2.0f)), IsOk());
  // The range is done: both streams end OK.
  EXPECT_TRUE(a->closed);
  EXPECT_THAT(a->end, IsOk());
  EXPECT_TRUE(b->closed);
}

// Issue 37, finding 4: screening was refused in sharded mode. An owner screens its range:
// a member whose delta there is far larger than the others' is left out of its means.
TEST_F(ShardOwnerTest, AnOwnerScreensItsRangeAndTrimsItsValues) {
  ShardOwner::Assignment assignment = Assignment();
  assignment.members = {"a", "b", "c"};
  assignment.weights = {1, 1, 1};
  assignment.max_norm_ratio = 3;
  ASSERT_THAT(owner_.Install(assignment, &sink_), IsOk());
  std::vector<std::shared_ptr<FakeStream>> streams;
  std::vector<int64_t> sessions;
  for (const char* member : {"a", "b", "c"}) {
    streams.push_back(std::make_shared<FakeStream>());
    sessions.push_back(Attach(member, streams.back()));
  }
  const float values[] = {1.0f, 2.0f, 1e6f};  // c's delta: a million times the others'
  for (int chunk = 1; chunk < 3; ++chunk) {
    for (int m = 0; m < 3; ++m) {
      ASSERT_THAT(owner_.AddChunk(sessions[m], Fp32Chunk(chunk, values[m])), IsOk());
    }
  }
  ASSERT_EQ(streams[0]->sent.size(), 2u);
  EXPECT_FLOAT_EQ(FirstValue(*streams[0]->sent[0]), 1.5f);  // c is left out
  owner_.Finish("run-1", 3, 77);
  // The next round with a trimmed mean instead (3 members, 1/3: the median of each value).
  assignment.round = 4;
  assignment.attempt = 78;
  assignment.max_norm_ratio = 0;
  assignment.trim_fraction = 0.34;
  ASSERT_THAT(owner_.Install(assignment, &sink_), IsOk());
  std::vector<std::shared_ptr<FakeStream>> next;
  for (int m = 0; m < 3; ++m) {
    next.push_back(std::make_shared<FakeStream>());
    bool waiting = true;
    absl::StatusOr<int64_t> session =
        owner_.Attach(Header(assignment.members[m], 4, 78), next.back(), &waiting);
    ASSERT_THAT(session, IsOk());
    for (int chunk = 1; chunk < 3; ++chunk) {
      ASSERT_THAT(owner_.AddChunk(*session, Fp32Chunk(chunk, values[m])), IsOk());
    }
  }
  ASSERT_EQ(next[0]->sent.size(), 2u);
  EXPECT_FLOAT_EQ(FirstValue(*next[0]->sent[0]), 2.0f);
}

// Every member gets each mean from the owner, the coordinator gets each once through the sink,
// and the members' streams end OK once the range is averaged.
TEST_F(ShardOwnerTest, EveryMemberGetsEachMean) {
  ShardOwner::Assignment assignment = Assignment();
  ASSERT_THAT(owner_.Install(assignment, &sink_), IsOk());
  auto a = std::make_shared<FakeStream>();
  auto b = std::make_shared<FakeStream>();
  const int64_t sa = Attach("a", a);
  const int64_t sb = Attach("b", b);
  for (int c : {1, 2}) {
    ASSERT_THAT(owner_.AddChunk(sa, Fp32Chunk(c, 1.0f)), IsOk());
    ASSERT_THAT(owner_.AddChunk(sb, Fp32Chunk(c, 5.0f)), IsOk());
  }
  EXPECT_EQ(a->sent.size(), 2u);
  EXPECT_EQ(b->sent.size(), 2u);
  EXPECT_TRUE(b->closed);
  EXPECT_THAT(b->end, IsOk());
  ShardOwner other;
  assignment.weights.pop_back();  // not one weight per member
  EXPECT_THAT(other.Install(assignment, &sink_),
              StatusIs(absl::StatusCode::kInvalidArgument, "shard assignment"));
}

TEST_F(ShardOwnerTest, AStreamThatCameBeforeTheLayoutWaitsForIt) {
  auto a = std::make_shared<FakeStream>();
  const int64_t sa = Attach("a", a, /*expect_waiting=*/true);
  EXPECT_EQ(a->resumed, 0);
  ASSERT_THAT(owner_.Install(Assignment(), &sink_), IsOk());
  EXPECT_EQ(a->resumed, 1);
  EXPECT_THAT(owner_.AddChunk(sa, Fp32Chunk(1, 1.0f)), IsOk());
}

TEST_F(ShardOwnerTest, BadInputIsRefusedAndNamed) {
  ASSERT_THAT(owner_.Install(Assignment(), &sink_), IsOk());
  bool waiting = false;
  EXPECT_THAT(owner_.Attach(Header("stranger"), std::make_shared<FakeStream>(), &waiting),
              StatusIs(absl::StatusCode::kNotFound, "member_id"));
  auto a = std::make_shared<FakeStream>();
  const int64_t sa = Attach("a", a);
  EXPECT_THAT(owner_.Attach(Header("a"), std::make_shared<FakeStream>(), &waiting),
              StatusIs(absl::StatusCode::kAlreadyExists, "already"));
  EXPECT_THAT(owner_.AddChunk(sa, Fp32Chunk(0, 1.0f)),
              StatusIs(absl::StatusCode::kInvalidArgument, "outside this owner's range [1, 3)"));
  EXPECT_TRUE(a->closed);
  auto b = std::make_shared<FakeStream>();
  const int64_t sb = Attach("b", b);
  EXPECT_THAT(owner_.AddChunk(sb, Fp32Chunk(1, 1.0f, 100)),
              StatusIs(absl::StatusCode::kInvalidArgument, "chunk 1"));
  EXPECT_THAT(owner_.Attach(Header("a", 2), std::make_shared<FakeStream>(), &waiting),
              StatusIs(absl::StatusCode::kFailedPrecondition, "over"));
}

TEST_F(ShardOwnerTest, ADroppedMemberIsNoLongerWaitedFor) {
  ASSERT_THAT(owner_.Install(Assignment(), &sink_), IsOk());
  auto a = std::make_shared<FakeStream>();
  const int64_t sa = Attach("a", a);
  ASSERT_THAT(owner_.AddChunk(sa, Fp32Chunk(1, 4.0f)), IsOk());
  ASSERT_THAT(owner_.AddChunk(sa, Fp32Chunk(2, 4.0f)), IsOk());
  owner_.Drop("b");
  ASSERT_EQ(a->sent.size(), 2u);
  EXPECT_FLOAT_EQ(FirstValue(*a->sent[0]), 4.0f);  // the mean of the weights that arrived
}

TEST_F(ShardOwnerTest, FinishEndsOpenStreamsAndRefusesThatAttemptAfterwards) {
  ASSERT_THAT(owner_.Install(Assignment(), &sink_), IsOk());
  auto a = std::make_shared<FakeStream>();
  Attach("a", a);
  auto next = std::make_shared<FakeStream>();
  auto retry = std::make_shared<FakeStream>();
  bool waiting = false;
  ASSERT_THAT(owner_.Attach(Header("b", 4, 90), next, &waiting), IsOk());  // the next round's
  EXPECT_TRUE(waiting);
  owner_.Finish("run-1", 3, 77);
  EXPECT_THAT(a->end, StatusIs(absl::StatusCode::kAborted, "round 3 is over"));
  EXPECT_FALSE(next->closed);  // still waits for round 4
  EXPECT_THAT(owner_.Attach(Header("b", 3, 77), std::make_shared<FakeStream>(), &waiting),
              StatusIs(absl::StatusCode::kFailedPrecondition, "over"));
  EXPECT_THAT(owner_.Attach(Header("b", 2, 50), std::make_shared<FakeStream>(), &waiting),
              StatusIs(absl::StatusCode::kFailedPrecondition, "over"));
  // Round 3 aborted: it is tried again under a new attempt, which this owner serves.
  ASSERT_THAT(owner_.Attach(Header("a", 3, 78), retry, &waiting), IsOk());
  EXPECT_TRUE(waiting);
  ShardOwner::Assignment again = Assignment();
  again.attempt = 78;
  ASSERT_THAT(owner_.Install(again, &sink_), IsOk());
  EXPECT_EQ(retry->resumed, 1);
  EXPECT_FALSE(next->closed);  // round 4's still waits
}

}  // namespace
}  // namespace localsgd
