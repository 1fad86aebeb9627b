#include "exchange/data_plane_server.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/sync_stream.h>

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/auth.h"
#include "common/data_plane_tag.h"
#include "exchange/codec.h"
#include "exchange/received_chunk.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace localsgd {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;

constexpr char kToken[] = "data-plane-token";
// The node leader the server is for: streams to it carry tags made under its key.
constexpr char kSelf[] = "owner/0";
constexpr char kSelfCredential[] = "owner-credential";

// `header` with the tag the coordinator would give its sender for a stream to kSelf.
void Tag(v1::ReduceHeader* header) {
  header->set_member_tag(
      DataPlaneTag(DataPlaneKey(kSelfCredential),
                   DataPlaneStream{header->run_id(), header->round(), header->attempt(),
                                   header->member_id(), kSelf}));
}
constexpr int64_t kChunkValues = 64;

// The node's uploader to the coordinator is not under test here.
class DroppingSink : public OwnerFailureSink {
 public:
  void OnFailure(const absl::Status&) override {}
};

v1::ReduceRequest Header(const std::string& member) {
  v1::ReduceRequest request;
  v1::ReduceHeader* header = request.mutable_header();
  header->set_run_id("run-1");
  header->set_round(4);
  header->set_attempt(9);
  header->set_member_id(member);
  Tag(header);
  return request;
}

v1::ReduceRequest Chunk(int index, float value, int64_t values = kChunkValues) {
  std::vector<float> data(static_cast<size_t>(values), value);
  v1::ReduceRequest request;
  request.mutable_chunk()->set_index(index);
  Encode(v1::CODEC_FP32, data, request.mutable_chunk()->mutable_data());
  return request;
}

// A real server on a free port whose owner has chunks [0, 2) of a 2-chunk vector for members
// a, b and c (equal weights); the tests send what hostile or well-behaved members would.
class DataPlaneServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DataPlaneServer::Options options;
    options.token = kToken;
    options.identity = [] { return StreamTagCheck::Identity{kSelf, kSelfCredential}; };
    auto server = DataPlaneServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    channel_ = grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
  }

  absl::Status Install() {
    ShardOwner::Assignment assignment;
    assignment.run_id = "run-1";
    assignment.round = 4;
    assignment.attempt = 9;
    assignment.members = {"a", "b", "c"};
    assignment.weights = {1, 1, 1};
    assignment.layout = ChunkLayout{2 * kChunkValues, kChunkValues};
    assignment.begin_chunk = 0;
    assignment.end_chunk = 2;
    return server_->owner()->Install(std::move(assignment), &sink_);
  }

  std::unique_ptr<grpc::ClientContext> Context() {
    return AuthorizedContext(kToken, absl::Seconds(20));
  }

  // Sends `requests`, then closes its side; returns the call's status and the means it got.
  grpc::Status Send(const std::vector<v1::ReduceRequest>& requests,
                    std::vector<v1::ReduceResponse>* means = nullptr) {
    auto context = Context();
    auto stream = v1::DataPlane::NewStub(channel_)->Reduce(context.get());
    for (const v1::ReduceRequest& request : requests) {
      if (!stream->Write(request)) break;
    }
    stream->WritesDone();
    v1::ReduceResponse response;
    while (stream->Read(&response)) {
      if (means != nullptr) means->push_back(response);
    }
    return stream->Finish();
  }

  // Sends `bytes` as one message, whatever they are, through the generic (byte-level) API.
  grpc::Status SendRaw(const std::string& bytes) {
    auto context = Context();
    grpc::GenericStub stub(channel_);
    grpc::CompletionQueue cq;
    auto call = stub.PrepareCall(context.get(), "/localsgd.v1.DataPlane/Reduce", &cq);
    auto wait = [&cq] {
      void* tag;
      bool ok;
      EXPECT_TRUE(cq.Next(&tag, &ok));
      return ok;
    };
    call->StartCall(nullptr);
    wait();
    grpc::Slice slice(bytes);
    grpc::ByteBuffer buffer(&slice, 1);
    call->Write(buffer, nullptr);
    wait();
    call->WritesDone(nullptr);
    wait();
    grpc::ByteBuffer reply;
    call->Read(&reply, nullptr);
    wait();
    grpc::Status status;
    call->Finish(&status, nullptr);
    wait();
    cq.Shutdown();
    void* tag;
    bool ok;
    while (cq.Next(&tag, &ok)) {
    }
    return status;
  }

  std::unique_ptr<DataPlaneServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  DroppingSink sink_;
};

TEST_F(DataPlaneServerTest, MalformedStreamsAreRefusedNamingWhatIsWrong) {
  ASSERT_TRUE(Install().ok());
  grpc::Status status = Send({Chunk(0, 1)});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("the first message must be a header"));

  status = Send({});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("ended before a header"));

  status = SendRaw("\xff\xff\xff\xff not a protobuf");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("does not parse as a ReduceRequest"));

  status = Send({Header("mallory")});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(status.error_message(), HasSubstr("mallory"));

  v1::ReduceRequest over = Header("a");
  over.mutable_header()->set_attempt(8);  // an attempt that is over
  Tag(over.mutable_header());
  status = Send({over});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);

  // Members' streams with bad content, each refused naming the problem: c sends its header
  // twice, b a chunk outside the range, a a chunk of the wrong size.
  status = Send({Header("c"), Header("c")});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("header sent twice"));
  status = Send({Header("b"), Chunk(7, 1)});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("chunk.index: 7"));
  status = Send({Header("a"), Chunk(0, 1, kChunkValues - 1)});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("chunk 0"));
  // A second stream of a member in the same attempt is refused: what its first one sent
  // stays counted, and the coordinator decides whether the round goes on without it.
  status = Send({Header("c")});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_THAT(status.error_message(), HasSubstr("member c"));
}

TEST_F(DataPlaneServerTest, AfterHostileStreamsTheRoundStillAveragesWhatItsMembersSent) {
  ASSERT_TRUE(Install().ok());
  EXPECT_EQ(Send({Header("c"), Header("c")}).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Send({Header("mallory"), Chunk(0, 1000)}).error_code(), grpc::StatusCode::NOT_FOUND);
  server_->owner()->Drop("c");  // as the coordinator would: the round goes on without it

  std::vector<v1::ReduceResponse> means_a;
  std::vector<v1::ReduceResponse> means_b;
  grpc::Status status_a;
  std::thread a([&] { status_a = Send({Header("a"), Chunk(0, 1), Chunk(1, 1)}, &means_a); });
  const grpc::Status status_b = Send({Header("b"), Chunk(0, 3), Chunk(1, 5)}, &means_b);
  a.join();
  ASSERT_TRUE(status_a.ok()) << status_a.error_message();
  ASSERT_TRUE(status_b.ok()) << status_b.error_message();
  ASSERT_EQ(means_a.size(), 2u);
  ASSERT_EQ(means_b.size(), 2u);
  for (const std::vector<v1::ReduceResponse>* means : {&means_a, &means_b}) {
    for (const v1::ReduceResponse& mean : *means) {
      std::vector<float> values(kChunkValues);
      ASSERT_TRUE(Decode(v1::CODEC_FP32, mean.mean().data(), absl::MakeSpan(values)).ok());
      const float expected = mean.mean().index() == 0 ? 2.0f : 3.0f;  // (1+3)/2, (1+5)/2
      EXPECT_EQ(values.front(), expected);
      EXPECT_EQ(values.back(), expected);
    }
  }
}

TEST_F(DataPlaneServerTest, AStreamBeforeTheLayoutWaitsAndReadsOnOnceItIsInstalled) {
  std::vector<v1::ReduceResponse> means_a;
  grpc::Status status_a;
  std::thread a([&] { status_a = Send({Header("a"), Chunk(0, 2), Chunk(1, 2)}, &means_a); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // a's header is in, waiting
  ASSERT_TRUE(Install().ok());
  server_->owner()->Drop("b");
  server_->owner()->Drop("c");
  a.join();
  ASSERT_TRUE(status_a.ok()) << status_a.error_message();
  EXPECT_EQ(means_a.size(), 2u);
}

TEST_F(DataPlaneServerTest, AStreamWaitingForAnotherRunEndsWhenThisOwnerLearnsItsRound) {
  v1::ReduceRequest other_run = Header("a");
  other_run.mutable_header()->set_run_id("run-0");
  Tag(other_run.mutable_header());
  grpc::Status status;
  std::thread waiting([&] { status = Send({other_run, Chunk(0, 2)}); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_TRUE(Install().ok());
  waiting.join();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), HasSubstr("of run run-0 is not this owner's round"));
}

TEST_F(DataPlaneServerTest, ShutdownEndsStreamsStillWaitingForTheLayout) {
  grpc::Status status_a;
  std::thread a([&] { status_a = Send({Header("a"), Chunk(0, 2)}); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  server_->Shutdown();
  a.join();
  EXPECT_FALSE(status_a.ok());
}

// DataPlane.Pass, a ring round's stream from the member before this one: the token is
// required, a header must come first and only once, and what a well-formed stream brings
// waits in the inbox until this member follows its round, then ends cleanly.
class PassTest : public DataPlaneServerTest {
 protected:
  grpc::Status Pass(std::unique_ptr<grpc::ClientContext> context,
                    const std::vector<v1::PassRequest>& requests) {
    v1::PassResponse response;
    auto stream = v1::DataPlane::NewStub(channel_)->Pass(context.get(), &response);
    for (const v1::PassRequest& request : requests) {
      if (!stream->Write(request)) break;
    }
    stream->WritesDone();
    return stream->Finish();
  }
  static v1::PassRequest PassHeader(int64_t round, uint64_t attempt) {
    v1::PassRequest request;
    *request.mutable_header() = Header("a").header();
    request.mutable_header()->set_round(round);
    request.mutable_header()->set_attempt(attempt);
    Tag(request.mutable_header());
    return request;
  }
  static v1::PassRequest Sum(int index) {
    v1::PassRequest request;
    *request.mutable_sum() = Chunk(index, 1).chunk();
    return request;
  }
  // A Pass stream of messages in the bytes given (as a sender that is not ours might write
  // them).
  grpc::Status PassBytes(const std::vector<std::string>& messages) {
    std::unique_ptr<grpc::ClientContext> context = Context();
    const grpc::internal::RpcMethod method("/localsgd.v1.DataPlane/Pass",
                                           grpc::internal::RpcMethod::CLIENT_STREAMING, channel_);
    grpc::ByteBuffer response;
    std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> stream(
        grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(channel_.get(), method,
                                                                      context.get(), &response));
    for (const std::string& bytes : messages) {
      grpc::Slice slice(bytes);
      if (!stream->Write(grpc::ByteBuffer(&slice, 1))) break;
    }
    stream->WritesDone();
    return stream->Finish();
  }
  // The next message in the inbox: a sum of chunk `index` holding `data`.
  void ExpectSum(int index, const std::string& data) {
    absl::StatusOr<std::optional<ReceivedChunk>> next = server_->inbox()->Next();
    ASSERT_TRUE(next.ok()) << next.status();
    ASSERT_TRUE(next->has_value());
    EXPECT_EQ((*next)->field(), v1::PassRequest::kSumFieldNumber);
    EXPECT_EQ((*next)->index(), index);
    std::string got;
    for (absl::string_view piece : (*next)->data()) got.append(piece.data(), piece.size());
    EXPECT_EQ(got, data);
  }
};

TEST_F(PassTest, RefusesAMissingOrWrongTokenAndMalformedStreams) {
  grpc::Status status = Pass(std::make_unique<grpc::ClientContext>(), {PassHeader(4, 9)});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  status = Pass(AuthorizedContext("wrong", absl::Seconds(20)), {PassHeader(4, 9)});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  status = Pass(Context(), {Sum(0)});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("the first message must be a header"));
  status = Pass(Context(), {});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("ended before a header"));
  status = Pass(Context(), {PassHeader(4, 9), PassHeader(4, 9)});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("header sent twice"));
  // This member follows attempt 10 by now: attempt 9's streams are over.
  server_->inbox()->Follow("run-1", 4, 10, "a");
  status = Pass(Context(), {PassHeader(4, 9), Sum(0)});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  server_->inbox()->Stop();
}

// Issue 50, finding 1: header-only Pass streams in any member's name, for rounds ahead and the
// largest attempt, filled a leader's inbox and kept its predecessor's real stream out. A
// stream whose tag the coordinator did not make for this member is now refused as it opens,
// before anything is kept, and the real stream still gets in.
TEST_F(PassTest, StreamsTheCoordinatorDidNotScheduleAreRefusedAndCannotFillTheInbox) {
  server_->inbox()->Follow("run-1", 4, 9, "a");
  for (int i = 0; i < 2 * RingInbox::kMaxStreams; ++i) {
    v1::PassRequest forged = PassHeader(5 + i % 2, ~uint64_t{0});
    forged.mutable_header()->set_member_id(i % 2 ? "a" : "mallory");
    forged.mutable_header()->set_member_tag(i % 3 ? "forged" : "");
    grpc::Status status = Pass(Context(), {forged});
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_THAT(status.error_message(), HasSubstr("member_tag"));
  }
  // A tag made for another receiver does not open a stream here either.
  v1::PassRequest elsewhere = PassHeader(5, 1);
  elsewhere.mutable_header()->set_member_tag(
      DataPlaneTag(DataPlaneKey(kSelfCredential), DataPlaneStream{"run-1", 5, 1, "a", "b/0"}));
  EXPECT_EQ(Pass(Context(), {elsewhere}).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  // The predecessor's real streams, this round's and the next's (early), get in and are read.
  ASSERT_TRUE(Pass(Context(), {PassHeader(4, 9), Sum(0)}).ok());
  ASSERT_TRUE(Pass(Context(), {PassHeader(5, 1), Sum(1)}).ok());
  ExpectSum(0, Sum(0).sum().data());
  server_->inbox()->Follow("run-1", 5, 1, "a");
  ExpectSum(1, Sum(1).sum().data());
}

// Issue 50, finding 2: a leader readmitted after a suspension follows a round far ahead of the
// last one it followed; its predecessor's stream for that round, which may come first, waits.
TEST_F(PassTest, AStreamForARoundFarAheadOfTheLastFollowedWaits) {
  server_->inbox()->Follow("run-1", 30, 1, "a");
  ASSERT_TRUE(Pass(Context(), {PassHeader(1758, 40), Sum(2)}).ok());
  server_->inbox()->Follow("run-1", 1758, 40, "a");
  ExpectSum(2, Sum(2).sum().data());
}

TEST_F(DataPlaneServerTest, AReduceStreamTheCoordinatorDidNotScheduleIsRefused) {
  ASSERT_TRUE(Install().ok());
  v1::ReduceRequest forged = Header("b");
  forged.mutable_header()->set_member_tag("forged");
  grpc::Status status = Send({forged, Chunk(0, 1000)});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(status.error_message(), HasSubstr("member_tag"));
  // Before the layout too: a forged stream never waits here.
  v1::ReduceRequest early = Header("b");
  early.mutable_header()->set_round(5);
  early.mutable_header()->set_member_tag("forged");
  EXPECT_EQ(Send({early}).error_code(), grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(PassTest, AStreamBeforeTheLayoutWaitsInTheInbox) {
  ASSERT_TRUE(Pass(Context(), {PassHeader(5, 1), Sum(0), Sum(1)}).ok());
  server_->inbox()->Follow("run-1", 5, 1, "a");
  for (int index : {0, 1}) ExpectSum(index, Sum(index).sum().data());
  absl::StatusOr<std::optional<ReceivedChunk>> end = server_->inbox()->Next();
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_FALSE(end->has_value());  // the stream ended cleanly
}

// A message in another valid form than ours (here the chunk's data before its index) is
// parsed; one with neither a sum nor a mean, or that is not protobuf, ends the stream.
TEST_F(PassTest, OtherFormsAreParsedAndMessagesWithoutAChunkRefused) {
  const std::string data = Sum(3).sum().data();
  const auto length_delimited = [](char tag, const std::string& bytes) {
    std::string out(1, tag);
    for (size_t n = bytes.size();; n >>= 7) {  // the length, a varint
      out.push_back(static_cast<char>((n & 0x7f) | (n >= 0x80 ? 0x80 : 0)));
      if (n < 0x80) break;
    }
    return out + bytes;
  };
  const std::string reordered =
      length_delimited('\x12', length_delimited('\x12', data) + std::string("\x08\x03"));
  ASSERT_TRUE(PassBytes({PassHeader(6, 1).SerializeAsString(), reordered}).ok());
  server_->inbox()->Follow("run-1", 6, 1, "a");
  ExpectSum(3, data);
  server_->inbox()->Stop();
  uint64_t attempt = 1;  // a stream of its own for each
  for (const std::string& bad : {std::string(), std::string("\x12\x05\x08", 3)}) {
    grpc::Status status = PassBytes({PassHeader(7, attempt++).SerializeAsString(), bad});
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(),
                AnyOf(HasSubstr("neither a sum nor a mean"), HasSubstr("does not parse")));
  }
}

}  // namespace
}  // namespace localsgd
