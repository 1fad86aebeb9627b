// The sync round end to end: a real coordinator on 127.0.0.1:0 and node leaders as threads,
// each with its own gRPC channel, exchanging real encoded chunks.
#include <google/protobuf/text_format.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "common/file_util.h"
#include "common/grpc_channel.h"
#include "coordinator/coordinator_server.h"
#include "exchange/codec.h"
#include "exchange/model_client.h"
#include "exchange/star_exchange.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/localsgd/v1/averaging.grpc.pb.h"
#include "proto/localsgd/v1/coordinator.grpc.pb.h"
#include "tests/testutil/member_credentials.h"
#include "tests/testutil/random_vector.h"
#include "tests/testutil/status_matchers.h"
#include "tests/testutil/wait_for.h"
#include "worker/node_leader.h"

namespace localsgd {
namespace {

using ::localsgd::testing::IsOk;
using ::localsgd::testing::RandomVector;
using ::localsgd::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kToken[] = "avg-token";
constexpr int64_t kValues = 70'000;  // 5 chunks of 16384 values with chunk_bytes 64 KiB
constexpr absl::Duration kTimeout = absl::Seconds(30);

class AveragingTest : public ::testing::Test {
 protected:
  // Starts a coordinator, joins `nodes` node leaders (node-0 …) and starts a run.
  void Start(int nodes, const std::string& extra_spec = "") {
    ASSERT_THAT(StartServer(), IsOk());
    for (int i = 0; i < nodes; ++i) JoinNode(i);
    StartRun(extra_spec);
  }

  // A coordinator on a free port, keeping its state in state_dir_ (when set).
  absl::Status StartServer() {
    CoordinatorServer::Options options;
    options.grpc_address = "127.0.0.1:0";
    options.http_address = "";
    options.token = kToken;
    options.lease_timeout = absl::Seconds(60);
    options.state_dir = state_dir_;
    auto server = CoordinatorServer::Start(options);
    if (!server.ok()) return server.status();
    server_ = std::move(*server);
    coordinator_ = v1::Coordinator::NewStub(Channel());
    return absl::OkStatus();
  }

  std::shared_ptr<grpc::Channel> Channel() {
    return grpc::CreateChannel(server_->grpc_address(), grpc::InsecureChannelCredentials());
  }

  std::unique_ptr<grpc::ClientContext> Ctx() { return AuthorizedContext(kToken, kTimeout); }

  // Joins node-i's `ranks` ranks, rank 0 its leader (a leader stands for the ranks of its
  // node the coordinator saw join).
  void JoinNode(int i, int ranks = 1) {
    for (int rank = ranks - 1; rank >= 0; --rank) {
      v1::JoinRequest request;
      request.mutable_identity()->set_node_name(absl::StrCat("node-", i));
      request.mutable_identity()->set_local_rank(rank);
      request.mutable_identity()->set_local_world_size(ranks);
      v1::JoinResponse response;
      ASSERT_TRUE(coordinator_->Join(Ctx().get(), request, &response).ok());
      credentials_.Keep(response);
    }
  }

  void StartRun(const std::string& extra_spec) {
    v1::StartRunRequest request;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
        absl::StrCat("model { builtin: \"mlp\" } chunk_bytes: 65536 exchange: EXCHANGE_STAR ",
                     extra_spec),
        request.mutable_spec()));
    v1::StartRunResponse response;
    grpc::Status status = coordinator_->StartRun(Ctx().get(), request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_EQ(response.run().state(), v1::RUN_STATE_RUNNING);
    run_id_ = response.run().run_id();
    codec_ = response.run().spec().codec();
    layout_ = ChunkLayout::ForBytes(kValues, response.run().spec().chunk_bytes());
  }

  void StopRun() {
    v1::StopRunResponse response;
    ASSERT_TRUE(coordinator_->StopRun(Ctx().get(), v1::StopRunRequest(), &response).ok());
  }

  ModelClient Client() { return ModelClient(Channel(), kToken); }

  // One star round of `member` through a StarExchange of its own.
  absl::StatusOr<ExchangeResult> Sync(const SyncMember& member, int64_t round, int64_t step,
                                      absl::Span<const float> params, absl::Span<float> global) {
    StarExchange exchange(Channel(), kToken);
    return exchange.Run(member, {round, step, params, global, {}, kTimeout});
  }

  // A node leader standing for `ranks` ranks (its delta's weight).
  SyncMember Member(int node, int ranks = 1) {
    const std::string id = absl::StrCat("node-", node, "/0");
    return SyncMember{run_id_, id, codec_, static_cast<double>(ranks), ranks, credentials_.Of(id)};
  }

  // Uploads global[0] from node-0 and gives every member a copy.
  std::vector<float> InitModel(uint32_t seed = 7) {
    std::vector<float> global0 = RandomVector(kValues, seed);
    EXPECT_THAT(Client().InitModel(run_id_, "node-0/0", credentials_.Get("node-0/0"), global0,
                                   layout_, kTimeout),
                IsOk());
    return global0;
  }

  v1::CoordinatorStatus Status() {
    v1::CoordinatorStatus status;
    EXPECT_TRUE(coordinator_->GetStatus(Ctx().get(), v1::GetStatusRequest(), &status).ok());
    return status;
  }

  // Each member in its own thread syncs `params[m]` against `globals[m]` for `round`.
  std::vector<absl::StatusOr<ExchangeResult>> SyncAll(const std::vector<int>& nodes, int64_t round,
                                                      const std::vector<std::vector<float>>& params,
                                                      std::vector<std::vector<float>>& globals,
                                                      const std::vector<double>& weights) {
    std::vector<absl::StatusOr<ExchangeResult>> results(nodes.size(), absl::UnknownError(""));
    std::vector<std::thread> threads;
    for (size_t m = 0; m < nodes.size(); ++m) {
      threads.emplace_back([&, m] {
        results[m] = Sync(Member(nodes[m], static_cast<int>(weights[m])), round, round * 8,
                          params[m], absl::MakeSpan(globals[m]));
      });
    }
    for (auto& t : threads) t.join();
    return results;
  }

  std::string state_dir_;
  std::unique_ptr<CoordinatorServer> server_;
  std::unique_ptr<v1::Coordinator::Stub> coordinator_;
  std::string run_id_;
  v1::Codec codec_ = v1::CODEC_FP32;
  ChunkLayout layout_;

 public:
  testing::MemberCredentials credentials_;  // RawMember reads them too
};

TEST_F(AveragingTest, WeightedMeanMatchesReferenceAndEveryCopyIsBitIdentical) {
  ASSERT_THAT(StartServer(), IsOk());
  for (int i = 0; i < 4; ++i) JoinNode(i, /*ranks=*/i + 1);  // each weighs its ranks
  StartRun("");
  ASSERT_GE(layout_.num_chunks(), 4);
  std::vector<float> global0 = InitModel();
  const std::vector<int> nodes = {0, 1, 2, 3};
  const std::vector<double> weights = {1, 2, 3, 4};
  std::vector<std::vector<float>> params, globals(4, global0);
  for (int m = 0; m < 4; ++m) {
    params.push_back(global0);
    std::vector<float> step = RandomVector(kValues, 100 + m, 0.1f);
    for (int64_t i = 0; i < kValues; ++i) params[m][i] += step[i];
  }
  auto results = SyncAll(nodes, 1, params, globals, weights);
  for (auto& result : results) {
    ASSERT_THAT(result, IsOk());
    EXPECT_EQ(result->round, 1);
    EXPECT_EQ(result->global_step, 8);
    EXPECT_THAT(result->members, ElementsAre("node-0/0", "node-1/0", "node-2/0", "node-3/0"));
  }
  for (int64_t i = 0; i < kValues; ++i) {
    double mean = 0;
    for (int m = 0; m < 4; ++m) mean += weights[m] * params[m][i];
    mean /= 10.0;
    ASSERT_NEAR(globals[0][i], mean, 1e-6) << i;
  }
  for (int m = 1; m < 4; ++m) {
    EXPECT_EQ(std::memcmp(globals[m].data(), globals[0].data(), kValues * sizeof(float)), 0);
  }
  auto fetched = Client().FetchModel("", kTimeout);
  ASSERT_THAT(fetched, IsOk());
  EXPECT_EQ(fetched->round, 1);
  EXPECT_EQ(fetched->global_step, 8);
  EXPECT_EQ(std::memcmp(fetched->values.data(), globals[0].data(), kValues * sizeof(float)), 0);
  // The header alone (holders_only), on a connection of its own that carries nothing else,
  // comes at once: written as a last write, it waited in gRPC's buffers for the deadline.
  ModelClient idle(
      CreateStreamingChannel(server_->grpc_address(), grpc::InsecureChannelCredentials(), 7),
      kToken);
  auto header = idle.FetchHolders("", absl::Seconds(3), /*include_momentum=*/false);
  ASSERT_THAT(header, IsOk());
  EXPECT_EQ(header->round(), 1);

  v1::CoordinatorStatus status = Status();
  EXPECT_EQ(status.run().round(), 1);
  EXPECT_EQ(status.run().global_step(), 8);
  ASSERT_EQ(status.recent_rounds_size(), 1);
  const v1::RoundRecord& record = status.recent_rounds(0);
  EXPECT_EQ(record.outcome(), v1::ROUND_OUTCOME_COMMITTED);
  EXPECT_EQ(record.members_size(), 4);
  EXPECT_EQ(record.bytes_received(), 4 * kValues * 4);
  EXPECT_EQ(record.bytes_sent(), 4 * kValues * 4);
  EXPECT_DOUBLE_EQ(record.compression_ratio(), 1.0);
  EXPECT_GE(record.slowest_wait_seconds(), 0);
}

TEST_F(AveragingTest, LossyCodecsKeepEveryCopyBitIdenticalOverRounds) {
  for (const char* codec : {"CODEC_BF16", "CODEC_FP16", "CODEC_INT8"}) {
    SCOPED_TRACE(codec);
    Start(3, absl::StrCat("codec: ", codec,
                          " outer_optimizer { lr: 0.7 momentum: 0.9 nesterov: true }"));
    std::vector<float> global0 = InitModel();
    std::vector<std::vector<float>> globals(3, global0);
    for (int64_t round = 1; round <= 3; ++round) {
      std::vector<std::vector<float>> params;
      for (int m = 0; m < 3; ++m) {
        params.push_back(globals[m]);
        std::vector<float> step = RandomVector(kValues, 1000 * round + m, 0.01f);
        for (int64_t i = 0; i < kValues; ++i) params[m][i] += step[i];
      }
      auto results = SyncAll({0, 1, 2}, round, params, globals, {1, 1, 1});
      for (auto& result : results) ASSERT_THAT(result, IsOk());
    }
    auto fetched = Client().FetchModel(run_id_, kTimeout);
    ASSERT_THAT(fetched, IsOk());
    EXPECT_EQ(fetched->round, 3);
    for (int m = 0; m < 3; ++m) {
      EXPECT_EQ(std::memcmp(globals[m].data(), fetched->values.data(), kValues * sizeof(float)), 0);
    }
    v1::CoordinatorStatus status = Status();
    EXPECT_GT(status.recent_rounds(0).compression_ratio(), 1.9);
    EXPECT_LT(status.recent_rounds(0).bytes_received(), 3 * kValues * 4 / 1.9);
    server_->Shutdown();
  }
}

TEST_F(AveragingTest, FirstUpdateChunkArrivesBeforeTheLastDeltaChunkIsSent) {
  Start(2);
  std::vector<float> global0 = InitModel();
  ASSERT_GE(layout_.num_chunks(), 3);
  // node-1 syncs normally in a thread.
  std::vector<float> global1 = global0;
  std::vector<float> params1 = global0;
  params1[0] += 2.0f;
  absl::StatusOr<ExchangeResult> result1 = absl::UnknownError("");
  std::thread other([&] { result1 = Sync(Member(1), 1, 8, params1, absl::MakeSpan(global1)); });
  // node-0 sends its first chunk only, and waits for the first update chunk before sending
  // the rest: store-and-forward would never send it, and this read would time out.
  auto stub = v1::Averaging::NewStub(Channel());
  auto context = Ctx();
  context->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
  auto stream = stub->Sync(context.get());
  v1::SyncRequest request;
  v1::SyncHeader* header = request.mutable_header();
  header->set_run_id(run_id_);
  header->set_round(1);
  header->set_member_id("node-0/0");
  header->set_member_credential(credentials_.Get("node-0/0"));
  header->set_vector_length(kValues);
  header->set_codec(v1::CODEC_FP32);
  header->set_weight(1);
  header->set_step(8);
  header->set_num_workers(1);
  ASSERT_TRUE(stream->Write(request));
  std::vector<float> zeros(static_cast<size_t>(layout_.chunk_values), 0.0f);
  auto send_chunk = [&](int c) {
    v1::SyncRequest chunk;
    chunk.mutable_chunk()->set_index(c);
    Encode(v1::CODEC_FP32, absl::MakeConstSpan(zeros.data(), layout_.size(c)),
           chunk.mutable_chunk()->mutable_data());
    return stream->Write(chunk);
  };
  ASSERT_TRUE(send_chunk(0));
  v1::SyncResponse response;
  ASSERT_TRUE(stream->Read(&response));
  ASSERT_TRUE(response.has_header());
  ASSERT_TRUE(stream->Read(&response)) << "no update before the last chunk was sent";
  ASSERT_TRUE(response.has_update());
  EXPECT_EQ(response.update().index(), 0);
  std::vector<float> update(static_cast<size_t>(layout_.size(0)));
  ASSERT_THAT(Decode(v1::CODEC_FP32, response.update().data(), absl::MakeSpan(update)), IsOk());
  EXPECT_FLOAT_EQ(update[0], 1.0f);  // mean of 0 and 2
  for (int c = 1; c < layout_.num_chunks(); ++c) ASSERT_TRUE(send_chunk(c));
  stream->WritesDone();
  bool committed = false;
  while (stream->Read(&response)) committed |= response.has_commit();
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_TRUE(committed);
  other.join();
  ASSERT_THAT(result1, IsOk());
}

// A raw member stream that sends its header and `chunks` zero chunks, for fault tests.
class RawMember {
 public:
  RawMember(AveragingTest* test, v1::Averaging::Stub* stub,
            std::unique_ptr<grpc::ClientContext> ctx)
      : test_(test), context_(std::move(ctx)), stream_(stub->Sync(context_.get())) {}
  // Sends `header`, with its member's credential when it names none.
  bool Header(const v1::SyncHeader& header) {
    v1::SyncRequest request;
    *request.mutable_header() = header;
    if (header.member_credential().empty()) {
      request.mutable_header()->set_member_credential(test_->credentials_.Get(header.member_id()));
    }
    return stream_->Write(request);
  }
  bool Chunk(int index, const std::string& data) {
    v1::SyncRequest request;
    request.mutable_chunk()->set_index(index);
    request.mutable_chunk()->set_data(data);
    return stream_->Write(request);
  }
  bool ReadRoundHeader() {
    v1::SyncResponse response;
    return stream_->Read(&response) && response.has_header();
  }
  // Reads until the server ends the stream, without closing this side first.
  grpc::Status Await() {
    v1::SyncResponse response;
    while (stream_->Read(&response)) {
    }
    return stream_->Finish();
  }
  grpc::Status Finish() {
    stream_->WritesDone();
    v1::SyncResponse response;
    while (stream_->Read(&response)) {
    }
    return stream_->Finish();
  }
  grpc::ClientContext* context() { return context_.get(); }

 private:
  AveragingTest* test_;
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::SyncRequest, v1::SyncResponse>> stream_;
};

v1::SyncHeader HeaderFor(const std::string& run_id, int node, int64_t round) {
  v1::SyncHeader header;
  header.set_run_id(run_id);
  header.set_round(round);
  header.set_member_id(absl::StrCat("node-", node, "/0"));
  header.set_vector_length(kValues);
  header.set_codec(v1::CODEC_FP32);
  header.set_weight(1);
  header.set_step(round * 8);
  header.set_num_workers(1);
  return header;
}

TEST_F(AveragingTest, MemberKilledMidRoundIsDroppedAndTheRoundCompletes) {
  Start(3, "min_workers: 2");
  std::vector<float> global0 = InitModel();
  auto stub = v1::Averaging::NewStub(Channel());
  RawMember victim(this, stub.get(), Ctx());
  ASSERT_TRUE(victim.Header(HeaderFor(run_id_, 2, 1)));
  ASSERT_TRUE(victim.ReadRoundHeader());  // the victim is in the round
  std::string chunk0;
  Encode(v1::CODEC_FP32, std::vector<float>(static_cast<size_t>(layout_.size(0)), 100.0f), &chunk0);
  ASSERT_TRUE(victim.Chunk(0, chunk0));
  std::vector<std::vector<float>> params(2, global0), globals(2, global0);
  std::thread kill([&] { victim.context()->TryCancel(); });
  kill.join();
  auto results = SyncAll({0, 1}, 1, params, globals, {1, 1});
  for (auto& result : results) {
    ASSERT_THAT(result, IsOk());
    EXPECT_THAT(result->members, ElementsAre("node-0/0", "node-1/0"));
  }
  victim.Finish();
  v1::CoordinatorStatus status = Status();
  EXPECT_EQ(status.run().round(), 1);
  const v1::RoundRecord& record = status.recent_rounds(0);
  ASSERT_EQ(record.dropped_size(), 1);
  EXPECT_EQ(record.dropped(0).member_id(), "node-2/0");
}

TEST_F(AveragingTest, SilentMemberIsDroppedAtTheDeadline) {
  Start(3, "min_workers: 2 round_deadline_seconds: 1");
  std::vector<float> global0 = InitModel();
  auto stub = v1::Averaging::NewStub(Channel());
  RawMember silent(this, stub.get(), Ctx());
  ASSERT_TRUE(silent.Header(HeaderFor(run_id_, 2, 1)));  // then nothing
  std::vector<std::vector<float>> params(2, global0), globals(2, global0);
  auto results = SyncAll({0, 1}, 1, params, globals, {1, 1});
  for (auto& result : results) ASSERT_THAT(result, IsOk());
  EXPECT_EQ(silent.Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(Status().recent_rounds(0).dropped(0).reason(), HasSubstr("deadline"));
}

TEST_F(AveragingTest, QuorumLostAbortsAndMembersKeepTheirWeights) {
  Start(2, "min_workers: 2");
  std::vector<float> global0 = InitModel();
  auto stub = v1::Averaging::NewStub(Channel());
  {
    RawMember survivor(this, stub.get(), Ctx());
    RawMember quitter(this, stub.get(), Ctx());
    ASSERT_TRUE(survivor.Header(HeaderFor(run_id_, 0, 1)));
    ASSERT_TRUE(quitter.Header(HeaderFor(run_id_, 1, 1)));
    ASSERT_TRUE(survivor.ReadRoundHeader());
    ASSERT_TRUE(quitter.ReadRoundHeader());  // both are in the round now
    quitter.context()->TryCancel();
    grpc::Status status = survivor.Await();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::ABORTED);
    EXPECT_THAT(status.error_message(), HasSubstr("quorum"));
    quitter.Finish();
  }
  EXPECT_EQ(Status().run().round(), 0);
  EXPECT_EQ(Status().rounds_aborted_total(), 1);
  // Members keep their weights, and at the next boundary round 1 commits.
  std::vector<std::vector<float>> params(2, global0), globals(2, global0);
  params[0][0] += 1.0f;
  auto results = SyncAll({0, 1}, 1, params, globals, {1, 1});
  for (auto& result : results) ASSERT_THAT(result, IsOk());
  EXPECT_EQ(Status().run().round(), 1);
  EXPECT_FLOAT_EQ(globals[0][0], global0[0] + 0.5f);
}

TEST_F(AveragingTest, BadInputIsRefusedAndTheOthersLoseNothing) {
  // One bad member, round after round: each case is refused for what it sent (suspending it
  // after a few is ShardedTest's ALeaderWhoseDataAddressPointsNowhere... and RoundManagerTest's).
  Start(3, "min_workers: 2 suspend_after_failed_rounds: 0");
  std::vector<float> global0 = InitModel();
  auto stub = v1::Averaging::NewStub(Channel());
  // A valid chunk 0 equal to the good members' (delta 1 at value 0): a member dropped later
  // keeps the valid chunks it already delivered in their means (see RangeReducer), so it
  // must not move the mean that the assertions below expect.
  std::vector<float> delta0(static_cast<size_t>(layout_.chunk_values), 0.0f);
  delta0[0] = 1.0f;
  std::string good_chunk;
  Encode(v1::CODEC_FP32, delta0, &good_chunk);
  std::string nan_chunk;
  Encode(v1::CODEC_FP32,
         std::vector<float>(static_cast<size_t>(layout_.chunk_values), std::nanf("")), &nan_chunk);

  struct Case {
    const char* name;
    std::function<void(v1::SyncHeader&)> header;
    std::vector<std::pair<int, std::string>> chunks;
    grpc::StatusCode code;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"wrong length",
       [](v1::SyncHeader& h) { h.set_vector_length(kValues - 1); },
       {},
       grpc::StatusCode::INVALID_ARGUMENT,
       "vector_length"},
      {"unknown run",
       [](v1::SyncHeader& h) { h.set_run_id("run-nope"); },
       {},
       grpc::StatusCode::NOT_FOUND,
       "run_id"},
      {"future round",
       [](v1::SyncHeader& h) { h.set_round(h.round() + 5); },
       {},
       grpc::StatusCode::FAILED_PRECONDITION,
       "future"},
      {"unknown codec",
       [](v1::SyncHeader& h) { h.set_codec(static_cast<v1::Codec>(99)); },
       {},
       grpc::StatusCode::INVALID_ARGUMENT,
       "codec"},
      {"other codec",
       [](v1::SyncHeader& h) { h.set_codec(v1::CODEC_INT8); },
       {},
       grpc::StatusCode::INVALID_ARGUMENT,
       "codec"},
      {"zero weight",
       [](v1::SyncHeader& h) { h.set_weight(0); },
       {},
       grpc::StatusCode::INVALID_ARGUMENT,
       "weight"},
      {"negative weight",
       [](v1::SyncHeader& h) { h.set_weight(-2); },
       {},
       grpc::StatusCode::INVALID_ARGUMENT,
       "weight"},
      // Issue 12, finding 5: finite as a double, infinite as a float. Before the check it
      // aborted the round for every member; now only this member is refused.
      {"weight beyond float",
       [](v1::SyncHeader& h) { h.set_weight(1e39); },
       {},
       grpc::StatusCode::INVALID_ARGUMENT,
       "weight"},
      // Issue 37, finding 4: a weight beyond the ranks a member stands for outweighed the
      // others (1e6 set the update to its delta) or cancelled them in double (1e17).
      {"more ranks than the node joined with",
       [](v1::SyncHeader& h) {
         h.set_num_workers(2);
         h.set_weight(2);
       },
       {},
       grpc::StatusCode::INVALID_ARGUMENT,
       "num_workers: must be in [1, 1] (the local_world_size"},
      {"weight beyond the member's ranks",
       [](v1::SyncHeader& h) { h.set_weight(1e6); },
       {},
       grpc::StatusCode::INVALID_ARGUMENT,
       "weight: must be num_workers (1), got 1e+06"},
      {"weight that cancels the others",
       [](v1::SyncHeader& h) { h.set_weight(1e17); },
       {},
       grpc::StatusCode::INVALID_ARGUMENT,
       "weight"},
      {"chunk out of range",
       nullptr,
       {{999, good_chunk}},
       grpc::StatusCode::INVALID_ARGUMENT,
       "out of range"},
      {"duplicate chunk",
       nullptr,
       {{0, good_chunk}, {0, good_chunk}},
       grpc::StatusCode::INVALID_ARGUMENT,
       "twice"},
      {"wrong chunk size",
       nullptr,
       {{0, good_chunk.substr(4)}},
       grpc::StatusCode::INVALID_ARGUMENT,
       "bytes"},
      {"NaN in delta", nullptr, {{0, nan_chunk}}, grpc::StatusCode::INVALID_ARGUMENT, "NaN"},
  };
  {
    // Not a member at all: refused before any round.
    v1::SyncHeader header = HeaderFor(run_id_, 2, 1);
    header.set_member_id("ghost/0");
    RawMember ghost(this, stub.get(), Ctx());
    ASSERT_TRUE(ghost.Header(header));
    grpc::Status status = ghost.Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_THAT(status.error_message(), HasSubstr("member_id"));
  }
  std::vector<std::vector<float>> globals(2, global0);
  int64_t round = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    v1::SyncHeader header = HeaderFor(run_id_, 2, round);
    if (c.header) c.header(header);
    RawMember bad(this, stub.get(), Ctx());
    ASSERT_TRUE(bad.Header(header));
    for (const auto& [index, data] : c.chunks) bad.Chunk(index, data);
    grpc::Status status = bad.Finish();
    EXPECT_EQ(status.error_code(), c.code) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(c.message));
    // The two good members commit the round without waiting for the bad one.
    std::vector<std::vector<float>> params = globals;
    for (auto& p : params) p[0] += 1.0f;
    auto results = SyncAll({0, 1}, round, params, globals, {1, 1});
    for (auto& result : results) {
      ASSERT_THAT(result, IsOk());
      EXPECT_THAT(result->members, ElementsAre("node-0/0", "node-1/0"));
    }
    EXPECT_EQ(std::memcmp(globals[0].data(), globals[1].data(), kValues * sizeof(float)), 0);
    EXPECT_FLOAT_EQ(globals[0][0], global0[0] + static_cast<float>(round));
    ++round;
  }
  auto fetched = Client().FetchModel(run_id_, kTimeout);
  ASSERT_THAT(fetched, IsOk());
  EXPECT_EQ(fetched->round, static_cast<int64_t>(cases.size()));
  EXPECT_EQ(std::memcmp(fetched->values.data(), globals[0].data(), kValues * sizeof(float)), 0);
}

// A member that missed a commit is told it is stale, and is not left out of the next round:
// it adopts the model and joins that round (else it would be stale again, round after round).
TEST_F(AveragingTest, StaleMemberIsToldSoAndTakesPartInTheNextRound) {
  Start(3, "min_workers: 2 round_deadline_seconds: 1");
  std::vector<float> global0 = InitModel();
  std::vector<std::vector<float>> globals(3, global0);
  auto first = SyncAll({0, 1}, 1, globals, globals, {1, 1});  // node-2 misses round 1
  for (auto& result : first) ASSERT_THAT(result, IsOk());
  std::vector<std::vector<float>> late = {global0};
  auto stale = SyncAll({2}, 1, late, late, {1});
  EXPECT_THAT(stale[0], StatusIs(absl::StatusCode::kFailedPrecondition, "stale"));
  globals[2] = globals[0];  // what the member adopts
  auto second = SyncAll({0, 1, 2}, 2, globals, globals, {1, 1, 1});
  for (auto& result : second) {
    ASSERT_THAT(result, IsOk());
    EXPECT_THAT(result->members, ElementsAre("node-0/0", "node-1/0", "node-2/0"));
  }
}

TEST_F(AveragingTest, LateJoinerFetchesTheCommittedGlobalModel) {
  Start(2);
  std::vector<float> global0 = InitModel();
  std::vector<std::vector<float>> globals(2, global0);
  for (int64_t round = 1; round <= 2; ++round) {
    std::vector<std::vector<float>> params = globals;
    params[0][5] += 1.0f;
    auto results = SyncAll({0, 1}, round, params, globals, {1, 1});
    for (auto& result : results) ASSERT_THAT(result, IsOk());
  }
  JoinNode(7);
  auto fetched = Client().FetchModel("", kTimeout);
  ASSERT_THAT(fetched, IsOk());
  EXPECT_EQ(fetched->run_id, run_id_);
  EXPECT_EQ(fetched->round, 2);
  EXPECT_EQ(fetched->global_step, 16);
  ASSERT_EQ(fetched->values.size(), static_cast<size_t>(kValues));
  EXPECT_EQ(std::memcmp(fetched->values.data(), globals[0].data(), kValues * sizeof(float)), 0);
  // The late joiner takes part in the next round.
  std::vector<int> nodes = {0, 1, 7};
  std::vector<std::vector<float>> params = {globals[0], globals[1], fetched->values};
  std::vector<std::vector<float>> next = params;
  auto results = SyncAll(nodes, 3, params, next, {1, 1, 1});
  for (auto& result : results) ASSERT_THAT(result, IsOk());
}

// Rounds 1-2, a coordinator restart on the same state directory, round 3: the same global
// model, bit for bit, as a coordinator that never stopped (global, outer momentum, round and
// global step restored; members keep their places; round 2 is not applied twice).
TEST_F(AveragingTest, RestartedCoordinatorResumesFromTheSavedModel) {
  const std::string diloco = "outer_optimizer { lr: 0.7 momentum: 0.9 nesterov: true }";
  auto params_for = [](int64_t round, const std::vector<std::vector<float>>& globals) {
    std::vector<std::vector<float>> params = globals;
    for (int m = 0; m < 2; ++m) {
      std::vector<float> step = RandomVector(kValues, 100 * round + m, 0.01f);
      for (int64_t i = 0; i < kValues; ++i) params[m][i] += step[i];
    }
    return params;
  };
  auto rounds = [&](int64_t first, int64_t last, std::vector<std::vector<float>>& globals) {
    for (int64_t round = first; round <= last; ++round) {
      auto results = SyncAll({0, 1}, round, params_for(round, globals), globals, {1, 1});
      for (auto& result : results) ASSERT_THAT(result, IsOk());
    }
  };
  // The reference: three rounds without a restart.
  Start(2, diloco);
  std::vector<float> global0 = InitModel();
  std::vector<std::vector<float>> reference(2, global0);
  rounds(1, 3, reference);
  server_->Shutdown();

  state_dir_ = std::string(std::getenv("TEST_TMPDIR")) + "/restart-state";
  Start(2, diloco);
  ASSERT_THAT(Client().InitModel(run_id_, "node-0/0", credentials_.Get("node-0/0"), global0,
                                 layout_, kTimeout),
              IsOk());
  std::vector<std::vector<float>> globals(2, global0);
  rounds(1, 2, globals);
  server_->Shutdown();
  server_.reset();

  ASSERT_THAT(StartServer(), IsOk());
  v1::CoordinatorStatus status = Status();
  EXPECT_EQ(status.run().run_id(), run_id_);
  EXPECT_EQ(status.run().state(), v1::RUN_STATE_RUNNING);
  EXPECT_EQ(status.run().round(), 2);
  EXPECT_EQ(status.run().global_step(), 16);
  ASSERT_EQ(status.members_size(), 2);  // restored, without joining again
  auto fetched = Client().FetchModel("", kTimeout);
  ASSERT_THAT(fetched, IsOk());
  EXPECT_EQ(fetched->round, 2);
  EXPECT_EQ(std::memcmp(fetched->values.data(), globals[0].data(), kValues * sizeof(float)), 0);
  rounds(3, 3, globals);
  EXPECT_EQ(std::memcmp(globals[0].data(), reference[0].data(), kValues * sizeof(float)), 0);
  EXPECT_EQ(Status().run().round(), 3);
  // A member that missed a commit and offers that round again is told it is stale: no round
  // is applied twice.
  std::vector<std::vector<float>> again = globals;
  auto stale = SyncAll({0}, 3, params_for(3, globals), again, {1});
  EXPECT_THAT(stale[0], StatusIs(absl::StatusCode::kFailedPrecondition, "stale"));
  EXPECT_EQ(Status().run().round(), 3);
  server_->Shutdown();
  server_.reset();

  // A damaged model or state file stops the coordinator from starting, naming the file.
  const std::string model = state_dir_ + "/model.bin";
  std::string bytes = *ReadFile(model, int64_t{1} << 32);
  ASSERT_THAT(WriteFileAtomically(model, bytes.substr(0, bytes.size() - 1)), IsOk());
  EXPECT_THAT(StartServer(), StatusIs(absl::StatusCode::kDataLoss, "model.bin"));
  ASSERT_THAT(WriteFileAtomically(model, bytes), IsOk());
  const std::string state = state_dir_ + "/state.textproto";
  const std::string saved_state = *ReadChecksummedFile(state);
  std::string text = *ReadFile(state, 1 << 30);
  text[text.find("round: 3") + 7] = '9';
  ASSERT_THAT(WriteFileAtomically(state, text), IsOk());
  EXPECT_THAT(StartServer(), StatusIs(absl::StatusCode::kDataLoss, "state.textproto"));

  // The model saved, then a crash before the run record followed: the restart records that
  // commit. A model two commits ahead of the record is refused.
  auto record_at = [&](int64_t round) {
    std::string payload = saved_state;
    payload.replace(payload.find("round: 3"), 8, absl::StrCat("round: ", round));
    payload.replace(payload.find("global_step: 24"), 15, absl::StrCat("global_step: ", 8 * round));
    return WriteChecksummedFile(state, payload);
  };
  ASSERT_THAT(record_at(1), IsOk());
  EXPECT_THAT(StartServer(), StatusIs(absl::StatusCode::kDataLoss, "more than one commit ahead"));
  ASSERT_THAT(record_at(2), IsOk());
  ASSERT_THAT(StartServer(), IsOk());
  EXPECT_EQ(Status().run().round(), 3);
  EXPECT_EQ(Status().run().global_step(), 24);
  server_->Shutdown();
  server_.reset();

  // Commits announced before their model was on disk (issue 54): a record two rounds past
  // the model. The saved model goes on as the next round, at its own global step.
  ASSERT_THAT(record_at(5), IsOk());
  ASSERT_THAT(StartServer(), IsOk());
  EXPECT_EQ(Status().run().round(), 6);
  EXPECT_EQ(Status().run().global_step(), 24);
  fetched = Client().FetchModel("", kTimeout);
  ASSERT_THAT(fetched, IsOk());
  EXPECT_EQ(fetched->round, 6);
  EXPECT_EQ(std::memcmp(fetched->values.data(), globals[0].data(), kValues * sizeof(float)), 0);
}

// Screening on: a member whose delta is 1000x the others' is left out of the mean, still gets
// the same global model, and the round's record names it and says why.
TEST_F(AveragingTest, NormOutlierIsExcludedAndReported) {
  Start(3, "max_delta_norm_ratio: 10");
  std::vector<float> global0 = InitModel();
  std::vector<std::vector<float>> params, globals(3, global0);
  for (int m = 0; m < 3; ++m) {
    params.push_back(global0);
    std::vector<float> step = RandomVector(kValues, 200 + m, m == 2 ? 100.0f : 0.1f);
    for (int64_t i = 0; i < kValues; ++i) params[m][i] += step[i];
  }
  auto results = SyncAll({0, 1, 2}, 1, params, globals, {1, 1, 1});
  for (auto& result : results) {
    ASSERT_THAT(result, IsOk());
    EXPECT_THAT(result->members, ElementsAre("node-0/0", "node-1/0"));
  }
  for (int64_t i = 0; i < kValues; ++i) {
    ASSERT_NEAR(globals[0][i], (params[0][i] + params[1][i]) / 2, 1e-5) << i;
  }
  EXPECT_EQ(std::memcmp(globals[2].data(), globals[0].data(), kValues * sizeof(float)), 0);
  const v1::RoundRecord record = Status().recent_rounds(0);
  ASSERT_EQ(record.excluded_size(), 1);
  EXPECT_EQ(record.excluded(0).member_id(), "node-2/0");
  EXPECT_THAT(record.excluded(0).reason(), HasSubstr("max_delta_norm_ratio 10"));
  EXPECT_EQ(record.dropped_size(), 0);
}

// Issue 37, finding 4: a trimmed mean at the coordinator (star): with three members and 1/3,
// each value's median delta, so one poisoned member moves no value.
TEST_F(AveragingTest, TheTrimmedMeanTakesEachValuesMedianOfThree) {
  Start(3, "trimmed_mean_fraction: 0.34");
  std::vector<float> global0 = InitModel();
  std::vector<std::vector<float>> params, globals(3, global0);
  for (int m = 0; m < 3; ++m) {
    params.push_back(global0);
    std::vector<float> step = RandomVector(kValues, 300 + m, 0.1f);
    for (int64_t i = 0; i < kValues; ++i) params[m][i] += step[i];
  }
  for (int64_t i = 0; i < kValues; i += 2) params[2][i] = 1e30f;
  auto results = SyncAll({0, 1, 2}, 1, params, globals, {1, 1, 1});
  for (auto& result : results) ASSERT_THAT(result, IsOk());
  for (int64_t i = 0; i < kValues; ++i) {
    std::vector<float> deltas;
    for (int m = 0; m < 3; ++m) deltas.push_back(params[m][i] - global0[i]);
    std::sort(deltas.begin(), deltas.end());
    ASSERT_NEAR(globals[0][i], global0[i] + deltas[1], 1e-5) << i;
  }
  EXPECT_EQ(std::memcmp(globals[2].data(), globals[0].data(), kValues * sizeof(float)), 0);
}

TEST_F(AveragingTest, InitModelOnceAndItsErrors) {
  Start(2, "enabled: true");
  EXPECT_THAT(Client().FetchModel("", kTimeout),
              StatusIs(absl::StatusCode::kFailedPrecondition, "no model"));
  std::vector<float> global(kValues), params(kValues);
  EXPECT_THAT(Sync(Member(0), 1, 8, params, absl::MakeSpan(global)),
              StatusIs(absl::StatusCode::kFailedPrecondition, "not initialised"));
  ChunkLayout wrong{kValues, layout_.chunk_values / 2};
  EXPECT_THAT(Client().InitModel(run_id_, "node-0/0", credentials_.Get("node-0/0"), global, wrong,
                                 kTimeout),
              StatusIs(absl::StatusCode::kInvalidArgument, "bytes"));
  std::vector<float> nan(kValues, std::nanf(""));
  EXPECT_THAT(
      Client().InitModel(run_id_, "node-0/0", credentials_.Get("node-0/0"), nan, layout_, kTimeout),
      StatusIs(absl::StatusCode::kInvalidArgument, "NaN"));
  EXPECT_THAT(Client().InitModel(run_id_, "ghost/0", credentials_.Get("ghost/0"), global, layout_,
                                 kTimeout),
              StatusIs(absl::StatusCode::kNotFound, "member_id"));
  InitModel();
  EXPECT_THAT(Client().InitModel(run_id_, "node-1/0", credentials_.Get("node-1/0"), global, layout_,
                                 kTimeout),
              StatusIs(absl::StatusCode::kAlreadyExists, "fetch"));
  ModelClient anonymous(Channel(), "");
  EXPECT_THAT(anonymous.FetchModel("", kTimeout),
              StatusIs(absl::StatusCode::kUnauthenticated, "token"));
  // A stopped run still serves its model; syncing it is refused.
  StopRun();
  EXPECT_THAT(Client().FetchModel(run_id_, kTimeout), IsOk());
  EXPECT_THAT(Sync(Member(0), 1, 8, params, absl::MakeSpan(global)),
              StatusIs(absl::StatusCode::kFailedPrecondition, "not running"));
}

// Issue 12, finding 4: an InitModel header claiming a huge vector allocates nothing before
// the bytes arrive (it used to allocate vector_length x 4 bytes per stream at once).
TEST_F(AveragingTest, AnInitModelClaimAllocatesNothingBeforeItsBytes) {
  Start(2);
  auto resident_mb = [] {
    std::string status = *ReadFile("/proc/self/status", 1 << 20);
    size_t at = status.find("VmRSS:");
    return std::atol(status.c_str() + at + 6) / 1024;
  };
  const long before = resident_mb();
  auto stub = v1::Averaging::NewStub(Channel());
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientWriter<v1::InitModelRequest>>> streams;
  v1::InitModelResponse response;
  for (int i = 0; i < 4; ++i) {  // 4 streams x 2^28 values: 4 GiB if allocated
    contexts.push_back(Ctx());
    streams.push_back(stub->InitModel(contexts.back().get(), &response));
    v1::InitModelRequest request;
    request.mutable_header()->set_run_id(run_id_);
    request.mutable_header()->set_member_id("node-0/0");
    request.mutable_header()->set_member_credential(credentials_.Get("node-0/0"));
    request.mutable_header()->set_vector_length(int64_t{1} << 28);
    ASSERT_TRUE(streams.back()->Write(request));
  }
  // The server has read the headers once a FetchModel behind them is answered.
  EXPECT_THAT(Client().FetchModel("", kTimeout),
              StatusIs(absl::StatusCode::kFailedPrecondition, "no model"));
  EXPECT_FALSE(WaitFor([&] { return resident_mb() - before >= 256; }, absl::Milliseconds(200)))
      << "the claimed vectors were allocated";
  for (auto& context : contexts) context->TryCancel();
  for (auto& stream : streams) stream->Finish();
}

TEST_F(AveragingTest, DisabledRunsDoNotAverage) {
  Start(1, "enabled: false");
  std::vector<float> global(kValues);
  EXPECT_THAT(Client().InitModel(run_id_, "node-0/0", credentials_.Get("node-0/0"), global, layout_,
                                 kTimeout),
              StatusIs(absl::StatusCode::kFailedPrecondition, "disabled"));
}

TEST_F(AveragingTest, RunCompletesWhenGlobalStepReachesTotalSteps) {
  Start(2, "total_steps: 16");
  std::vector<float> global0 = InitModel();
  std::vector<std::vector<float>> globals(2, global0);
  for (int64_t round = 1; round <= 2; ++round) {
    auto results = SyncAll({0, 1}, round, globals, globals, {1, 1});
    for (auto& result : results) ASSERT_THAT(result, IsOk());
  }
  EXPECT_EQ(Status().run().state(), v1::RUN_STATE_COMPLETED);
  EXPECT_THAT(Client().FetchModel(run_id_, kTimeout), IsOk());
}

// Finding 11 of issue 37: a node leader whose lease was lost (its heartbeat is joining again)
// waits for the coordinator to know it again to get the initial model, rather than giving up;
// a member the coordinator never comes to know is refused once the round timeout has passed.
TEST_F(AveragingTest, ALeaderWaitsForItsLeaseToGetTheInitialModel) {
  Start(1);
  std::vector<float> global0 = InitModel();
  StarExchange exchange(Channel(), kToken);
  ModelClient models = Client();
  NodeLeader rejoining(&models, &exchange, Member(1), layout_, absl::Seconds(20));
  std::vector<float> params(kValues, 0.0f);
  std::thread heartbeat([this] {
    absl::SleepFor(absl::Seconds(1));
    JoinNode(1);
  });
  EXPECT_THAT(rejoining.Start(absl::MakeSpan(params)), IsOk());
  heartbeat.join();
  EXPECT_EQ(std::memcmp(params.data(), global0.data(), kValues * sizeof(float)), 0);

  NodeLeader stranger(&models, &exchange, Member(9), layout_, absl::Seconds(2));
  const absl::Time start = absl::Now();
  EXPECT_THAT(stranger.Start(absl::MakeSpan(params)),
              StatusIs(absl::StatusCode::kNotFound, "member_id"));
  EXPECT_GE(absl::Now() - start, absl::Seconds(1));
}

}  // namespace
}  // namespace localsgd
