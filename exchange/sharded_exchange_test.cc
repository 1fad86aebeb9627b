// A commit a member delivered for but never heard of (its stream broke after the delivery, as
// when the coordinator is killed between recording the commit and announcing it), against a
// scripted coordinator: the member applies the update it delivered when the coordinator says
// that round committed with the digest the member would have, and only then.
#include "exchange/sharded_exchange.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "exchange/data_plane_server.h"
#include "exchange/held_model.h"
#include "exchange/model_digest.h"
#include "exchange/stream_tag_check.h"
#include "exchange/sync_stream.h"
#include "gtest/gtest.h"
#include "proto/localsgd/v1/averaging.grpc.pb.h"

namespace localsgd {
namespace {

constexpr char kToken[] = "token";
constexpr char kMember[] = "node-0/0";
constexpr int64_t kValues = 1000;
constexpr int64_t kChunkValues = 256;

// Answers round 1's first Sync with a layout of one member owning the whole vector (or the
// fragment `fragment` of `values` from `first_chunk`), reads its
// delivery and ends the stream UNAVAILABLE (no commit: the announcement was lost); the next
// `restarting` Syncs UNAVAILABLE before the header is read (the coordinator starting again);
// every later Sync with "round 1 committed" (StaleRound); a holders-only FetchModel with
// `digest`.
class ScriptedCoordinator : public v1::Averaging::Service {
 public:
  explicit ScriptedCoordinator(std::string data_address) : data_address_(std::move(data_address)) {}

  grpc::Status Sync(grpc::ServerContext*,
                    grpc::ServerReaderWriter<v1::SyncResponse, v1::SyncRequest>* stream) override {
    v1::SyncRequest request;
    if (!stream->Read(&request) || !request.has_header()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no header");
    }
    if (syncs_ > 0 && restarting > 0) {
      --restarting;
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the coordinator is starting");
    }
    if (syncs_++ > 0) {
      v1::SyncResponse stale;
      stale.mutable_stale()->set_committed_round(1);
      stale.mutable_stale()->set_global_step(8);
      stream->Write(stale);
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "round 1 is committed");
    }
    v1::SyncResponse layout;
    v1::RoundHeader* header = layout.mutable_header();
    header->set_round(1);
    header->add_members(kMember);
    header->add_weights(1);
    header->set_codec(v1::CODEC_FP32);
    header->set_num_chunks(static_cast<int>((values + kChunkValues - 1) / kChunkValues));
    header->set_first_chunk(first_chunk);
    header->set_fragment(fragment);
    header->set_chunk_values(kChunkValues);
    header->set_exchange(v1::EXCHANGE_SHARDED);
    header->set_attempt(7);
    v1::ShardRange* range = header->add_shards();
    range->set_owner_id(kMember);
    range->set_address(data_address_);
    range->set_begin_chunk(0);
    range->set_end_chunk(header->num_chunks());
    header->add_stream_tags("");
    stream->Write(layout);
    while (stream->Read(&request)) {
      if (request.has_delivered()) break;
    }
    delivered_ = request.has_delivered();
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the coordinator went away");
  }

  grpc::Status FetchModel(grpc::ServerContext*, const v1::FetchModelRequest* request,
                          grpc::ServerWriter<v1::FetchModelResponse>* writer) override {
    if (!request->holders_only()) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the coordinator keeps no copy");
    }
    v1::FetchModelResponse response;
    response.mutable_header()->set_run_id("run-1");
    response.mutable_header()->set_round(1);
    response.mutable_header()->set_global_step(8);
    response.mutable_header()->set_vector_length(kValues);
    response.mutable_header()->set_chunk_values(kChunkValues);
    response.mutable_header()->set_digest(digest);
    writer->Write(response);
    return grpc::Status::OK;
  }

  uint64_t digest = 0;
  int restarting = 0;
  // Round 1's fragment: `values` from chunk `first_chunk` of the model.
  int fragment = 0;
  int64_t values = kValues;
  int first_chunk = 0;
  bool delivered_ = false;

 private:
  const std::string data_address_;
  int syncs_ = 0;
};

class UnheardCommitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DataPlaneServer::Options options;
    options.token = kToken;
    options.identity = [] { return StreamTagCheck::Identity{kMember, "credential"}; };
    auto data_plane = DataPlaneServer::Start(options);
    ASSERT_TRUE(data_plane.ok()) << data_plane.status();
    data_plane_ = *std::move(data_plane);
    coordinator_ = std::make_unique<ScriptedCoordinator>(data_plane_->address());
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(coordinator_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ShardedExchange::Options exchange;
    exchange.coordinator =
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
    exchange.token = kToken;
    exchange.owner = data_plane_->owner();
    exchange.inbox = data_plane_->inbox();
    exchange.outer = OuterOptimizer{0.7, 0, false};
    exchange_ = std::make_unique<ShardedExchange>(exchange);
    for (int64_t i = 0; i < kValues; ++i) {
      global_[i] = 0.001f * static_cast<float>(i % 97);
      params_[i] = global_[i] + 0.01f * static_cast<float>(i % 13);
    }
  }
  void TearDown() override {
    server_->Shutdown();
    data_plane_.reset();
  }

  absl::StatusOr<ExchangeResult> Run() {
    const SyncMember member{"run-1", kMember, v1::CODEC_FP32, 1, 1, [] { return "credential"; }};
    return exchange_->Run(member, {1, 8, params_, absl::MakeSpan(global_), {}, absl::Seconds(10)});
  }

  // global + 0.7 (params - global), as the outer step makes it.
  std::vector<float> Next() const {
    std::vector<float> next(global_);
    OuterStepInPlace(OuterOptimizer{0.7, 0, false},
                     [&] {
                       std::vector<float> mean(kValues);
                       for (int64_t i = 0; i < kValues; ++i) mean[i] = params_[i] - global_[i];
                       return mean;
                     }(),
                     absl::MakeSpan(next), {});
    return next;
  }

  std::unique_ptr<DataPlaneServer> data_plane_;
  std::unique_ptr<ScriptedCoordinator> coordinator_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<ShardedExchange> exchange_;
  std::vector<float> global_ = std::vector<float>(kValues);
  std::vector<float> params_ = std::vector<float>(kValues);
};

TEST_F(UnheardCommitTest, TheDeliveredUpdateIsAppliedWhenTheCoordinatorsDigestIsItsOwn) {
  const std::vector<float> before = global_;
  const std::vector<float> next = Next();
  ASSERT_NE(next, before);
  coordinator_->digest = ModelDigest(next, {}, ChunkLayout{kValues, kChunkValues}).with_momentum;
  EXPECT_TRUE(absl::IsUnavailable(Run().status()));  // delivered, then no outcome
  ASSERT_TRUE(coordinator_->delivered_);
  EXPECT_EQ(global_, before);                    // nothing applied without a commit
  absl::StatusOr<ExchangeResult> heard = Run();  // "round 1 is committed"
  ASSERT_TRUE(heard.ok()) << heard.status();
  EXPECT_EQ(heard->round, 1);
  EXPECT_EQ(heard->global_step, 8);
  EXPECT_EQ(global_, next);
}

TEST_F(UnheardCommitTest, TheUpdateWaitsOutRefusalsThatSayNothingOfTheRound) {
  const std::vector<float> before = global_;
  const std::vector<float> next = Next();
  coordinator_->digest = ModelDigest(next, {}, ChunkLayout{kValues, kChunkValues}).with_momentum;
  coordinator_->restarting = 2;
  EXPECT_TRUE(absl::IsUnavailable(Run().status()));  // delivered, then no outcome
  EXPECT_TRUE(absl::IsUnavailable(Run().status()));  // the coordinator is starting again
  EXPECT_TRUE(absl::IsUnavailable(Run().status()));
  EXPECT_EQ(global_, before);
  absl::StatusOr<ExchangeResult> heard = Run();  // "round 1 is committed"
  ASSERT_TRUE(heard.ok()) << heard.status();
  EXPECT_EQ(heard->round, 1);
  EXPECT_EQ(global_, next);
}

TEST_F(UnheardCommitTest, AnotherDigestLeavesTheModelAsItWasAndTheRefusalStands) {
  const std::vector<float> before = global_;
  coordinator_->digest = 12345;  // the round committed on other copies
  EXPECT_TRUE(absl::IsUnavailable(Run().status()));
  absl::StatusOr<ExchangeResult> refused = Run();
  EXPECT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();
  EXPECT_EQ(global_, before);
}

// With fragments (the chaos soak, fragments 2: the coordinator killed between recording a
// round of fragment 1 and announcing it), the node's next header is often another fragment's.
// The update it delivered is applied to its own fragment of the held model all the same (the
// coordinator's digest is the whole model's), and the refusal stands: the node takes the run's
// model, which it holds now. Before, the update was dropped, and no node held the round.
TEST_F(UnheardCommitTest, AnotherFragmentsHeaderHearsTheCommitOfTheFragmentDelivered) {
  constexpr int64_t kBegin = 2 * kChunkValues;  // fragment 1: chunks 2 and 3
  HeldModel held;
  held.Install("run-1", 0, 0, global_, {});
  const std::vector<float> before = held.values();
  std::vector<float> next = before;
  OuterStepInPlace(OuterOptimizer{0.7, 0, false},
                   [&] {
                     std::vector<float> mean(kValues - kBegin);
                     for (int64_t i = kBegin; i < kValues; ++i) {
                       mean[i - kBegin] = params_[i] - global_[i];
                     }
                     return mean;
                   }(),
                   absl::MakeSpan(next).subspan(kBegin), {});
  coordinator_->digest = ModelDigest(next, {}, ChunkLayout{kValues, kChunkValues}).with_momentum;
  coordinator_->fragment = 1;
  coordinator_->values = kValues - kBegin;
  coordinator_->first_chunk = 2;
  const SyncMember member{"run-1", kMember, v1::CODEC_FP32, 1, 1, [] { return "credential"; }};
  const auto round = [&](int fragment, int64_t begin, int64_t size, int64_t step) {
    return ExchangeRound{1,
                         step,
                         absl::MakeConstSpan(params_).subspan(begin, size),
                         absl::MakeSpan(held.values()).subspan(begin, size),
                         {},
                         absl::Seconds(10),
                         fragment,
                         kValues,
                         &held,
                         begin};
  };
  const absl::StatusOr<ExchangeResult> lost =
      exchange_->Run(member, round(1, kBegin, kValues - kBegin, 8));
  EXPECT_TRUE(absl::IsUnavailable(lost.status())) << lost.status();  // delivered, then no outcome
  ASSERT_TRUE(coordinator_->delivered_);
  EXPECT_EQ(held.values(), before);
  const absl::StatusOr<ExchangeResult> refused = exchange_->Run(member, round(0, 0, kBegin, 9));
  EXPECT_TRUE(StaleRoundOf(refused.status()).has_value()) << refused.status();
  EXPECT_EQ(held.round(), 1);
  EXPECT_EQ(held.global_step(), 8);
  EXPECT_EQ(held.values(), next);
}

}  // namespace
}  // namespace localsgd
