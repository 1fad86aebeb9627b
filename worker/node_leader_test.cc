// NodeLeader against a scripted coordinator (the Averaging service's InitModel and FetchModel)
// and a scripted exchange: the initial model, its retries, and what a refused round leaves.
#include "worker/node_leader.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "exchange/held_model.h"
#include "exchange/sync_stream.h"
#include "gtest/gtest.h"
#include "proto/localsgd/v1/averaging.grpc.pb.h"

namespace localsgd {
namespace {

constexpr int64_t kValues = 10;

// InitModel: UNAVAILABLE `unavailable` times, then reads the upload and answers round 0;
// FetchModel: UNAVAILABLE (the committed model is nowhere to be had), counted.
class ScriptedCoordinator : public v1::Averaging::Service {
 public:
  grpc::Status InitModel(grpc::ServerContext*, grpc::ServerReader<v1::InitModelRequest>* reader,
                         v1::InitModelResponse* response) override {
    ++inits;
    if (unavailable > 0) {
      --unavailable;
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the coordinator is starting");
    }
    v1::InitModelRequest request;
    while (reader->Read(&request)) {
    }
    response->set_vector_length(kValues);
    return grpc::Status::OK;
  }
  grpc::Status FetchModel(grpc::ServerContext*, const v1::FetchModelRequest*,
                          grpc::ServerWriter<v1::FetchModelResponse>*) override {
    ++fetches;
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "no holder of the committed round");
  }

  std::atomic<int> inits{0};
  std::atomic<int> fetches{0};
  std::atomic<int> unavailable{0};
};

// Answers each Run with the next scripted reply.
class ScriptedExchange : public Exchange {
 public:
  using Reply = std::function<absl::StatusOr<ExchangeResult>(const ExchangeRound&)>;
  absl::StatusOr<ExchangeResult> Run(const SyncMember&, const ExchangeRound& round) override {
    Reply reply = std::move(replies.front());
    replies.pop_front();
    return reply(round);
  }
  bool keeps_momentum() const override { return false; }
  std::deque<Reply> replies;
};

absl::Status Stale(int64_t committed_round, int64_t global_step) {
  v1::StaleRound stale;
  stale.set_committed_round(committed_round);
  stale.set_global_step(global_step);
  return StaleRoundError(stale, absl::StrCat("round ", committed_round, " committed"));
}

class NodeLeaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&coordinator_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    models_ = std::make_unique<ModelClient>(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()),
        "token");
    for (int64_t i = 0; i < kValues; ++i) params_[i] = static_cast<float>(i);
  }
  void TearDown() override { server_->Shutdown(); }

  std::unique_ptr<NodeLeader> Leader() {
    return std::make_unique<NodeLeader>(
        models_.get(), &exchange_,
        SyncMember{"run-1", "node-0/0", v1::CODEC_FP32, 1, 1, [] { return "credential"; }},
        ChunkLayout{kValues, 4}, absl::Seconds(2), FragmentPlan(), &held_);
  }

  ScriptedCoordinator coordinator_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<ModelClient> models_;
  ScriptedExchange exchange_;
  HeldModel held_;
  std::vector<float> params_ = std::vector<float>(kValues);
};

TEST_F(NodeLeaderTest, StartUploadsTheInitialModelAndHoldsIt) {
  auto leader = Leader();
  ASSERT_TRUE(leader->Start(absl::MakeSpan(params_)).ok());
  EXPECT_EQ(held_.run_id(), "run-1");
  EXPECT_EQ(held_.round(), 0);
  EXPECT_EQ(held_.values(), params_);
}

TEST_F(NodeLeaderTest, StartRetriesACoordinatorThatIsStarting) {
  coordinator_.unavailable = 2;
  auto leader = Leader();
  const absl::Status started = leader->Start(absl::MakeSpan(params_));
  EXPECT_TRUE(started.ok()) << started;
  EXPECT_EQ(coordinator_.inits, 3);
}

TEST_F(NodeLeaderTest, ACommitTakesTheRoundsModelIntoTheParams) {
  auto leader = Leader();
  ASSERT_TRUE(leader->Start(absl::MakeSpan(params_)).ok());
  exchange_.replies.push_back([](const ExchangeRound& round) -> absl::StatusOr<ExchangeResult> {
    EXPECT_EQ(round.round, 1);
    round.held->Commit(1, 4, [&] {
      for (float& v : round.global) v += 1;
    });
    return ExchangeResult{1, 4, {"node-0/0"}};
  });
  std::vector<float> mine = params_;
  ASSERT_TRUE(leader->Sync(absl::MakeSpan(mine), 4, 0).ok());
  for (int64_t i = 0; i < kValues; ++i) EXPECT_EQ(mine[i], params_[i] + 1);
}

// The exchange heard of a round it had delivered for only when a header was refused with
// "that round committed", and applied it to the held model: the node takes that model as it
// takes any the run committed without it, without fetching it (the chaos soak: no holder to
// fetch from had heard of the round either).
TEST_F(NodeLeaderTest, AStaleRefusalForTheRoundItHoldsTakesThatModelWithoutAFetch) {
  auto leader = Leader();
  ASSERT_TRUE(leader->Start(absl::MakeSpan(params_)).ok());
  exchange_.replies.push_back([](const ExchangeRound& round) -> absl::StatusOr<ExchangeResult> {
    round.held->Commit(1, 4, [&] {
      for (float& v : round.held->values()) v *= 2;
    });
    return Stale(1, 4);
  });
  std::vector<float> mine(kValues, -1);
  const absl::Status status = leader->Sync(absl::MakeSpan(mine), 5, 0);
  EXPECT_TRUE(StaleRoundOf(status).has_value()) << status;
  EXPECT_EQ(coordinator_.fetches, 0);
  for (int64_t i = 0; i < kValues; ++i) EXPECT_EQ(mine[i], 2 * params_[i]);
  EXPECT_EQ(leader->round(), 1);
}

TEST_F(NodeLeaderTest, AStaleRefusalForARoundItDoesNotHoldFetchesThatRound) {
  auto leader = Leader();
  ASSERT_TRUE(leader->Start(absl::MakeSpan(params_)).ok());
  exchange_.replies.push_back(
      [](const ExchangeRound&) -> absl::StatusOr<ExchangeResult> { return Stale(3, 12); });
  std::vector<float> mine(kValues, -1);
  const absl::Status status = leader->Sync(absl::MakeSpan(mine), 12, 0);
  EXPECT_TRUE(absl::IsUnavailable(status)) << status;  // no holder: tried again later
  EXPECT_GE(coordinator_.fetches, 1);
  EXPECT_EQ(mine, std::vector<float>(kValues, -1));
  EXPECT_EQ(leader->round(), 0);
}

}  // namespace
}  // namespace localsgd
