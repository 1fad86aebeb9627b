// Sharded rounds end to end: a real coordinator on 127.0.0.1:0 and node leaders as threads,
// each serving its own data plane on 127.0.0.1:0 and exchanging real encoded chunks with the
// others. The reference is the star round on the same inputs.
#include <google/protobuf/text_format.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "common/data_plane_tag.h"
#include "common/tls.h"
#include "coordinator/coordinator_server.h"
#include "exchange/codec.h"
#include "exchange/data_plane_server.h"
#include "exchange/held_model.h"
#include "exchange/model_client.h"
#include "exchange/model_fetcher.h"
#include "exchange/sharded_exchange.h"
#include "exchange/star_exchange.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/localsgd/v1/averaging.grpc.pb.h"
#include "proto/localsgd/v1/coordinator.grpc.pb.h"
#include "tests/testutil/member_credentials.h"
#include "tests/testutil/random_vector.h"
#include "tests/testutil/status_matchers.h"
#include "worker/node_leader.h"

namespace localsgd {
namespace {

using ::localsgd::testing::IsOk;
using ::localsgd::testing::RandomVector;
using ::localsgd::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kToken[] = "shard-token";
constexpr absl::Duration kTimeout = absl::Seconds(30);
constexpr char kDiloco[] = "outer_optimizer { lr: 0.7 momentum: 0.9 nesterov: true } ";

using Vectors = std::vector<std::vector<float>>;

// One node leader: its data plane and its exchange.
struct Leader {
  // The model its data plane serves (when a NodeLeader keeps it there).
  std::unique_ptr<HeldModel> held = std::make_unique<HeldModel>();
  std::unique_ptr<DataPlaneServer> server;
  bool serves = false;  // owns ranges on `server`
  std::unique_ptr<ShardedExchange> client;
  SyncMember member;
};

class ShardedTest : public ::testing::Test {
 protected:
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

  // Joins, keeping the member's credential for its later calls.
  grpc::Status Join(const v1::JoinRequest& request, v1::JoinResponse* response) {
    grpc::Status status = coordinator_->Join(Ctx().get(), request, response);
    if (status.ok()) credentials_.Keep(*response);
    return status;
  }

  // Joins node-i's leader; with a data plane of its own unless `serve` is false.
  void JoinNode(int i, bool serve = true) {
    Leader& leader = leaders_[i];
    if (serve && leader.server == nullptr) {
      DataPlaneServer::Options options;
      options.token = kToken;
      const std::string id = absl::StrCat("node-", i, "/0");
      options.identity = [this, id] { return StreamTagCheck::Identity{id, credentials_.Get(id)}; };
      options.held = leader.held.get();
      auto server = DataPlaneServer::Start(options);
      ASSERT_THAT(server, IsOk());
      leader.server = std::move(*server);
    }
    // The node's 1 + i ranks join (its leader weighs them: StartRun), rank 0 last.
    for (int rank = i; rank >= 0; --rank) {
      v1::JoinRequest request;
      request.mutable_identity()->set_node_name(absl::StrCat("node-", i));
      request.mutable_identity()->set_local_rank(rank);
      request.mutable_identity()->set_local_world_size(1 + i);
      if (serve && rank == 0) request.set_data_address(leader.server->address());
      v1::JoinResponse response;
      grpc::Status status = Join(request, &response);
      ASSERT_TRUE(status.ok()) << status.error_message();
    }
    leader.serves = serve;
    leader.client = MakeClient(serve ? leader.server.get() : nullptr);
  }

  // A leader's exchange with the current coordinator and run, owning ranges on `server` (null:
  // none).
  std::unique_ptr<ShardedExchange> MakeClient(DataPlaneServer* server) {
    ShardedExchange::Options options;
    options.coordinator = Channel();
    options.token = kToken;
    options.owner = server != nullptr ? server->owner() : nullptr;
    options.inbox = server != nullptr ? server->inbox() : nullptr;
    options.outer = Outer();
    options.max_norm_ratio = run_.spec().max_delta_norm_ratio();
    options.trim_fraction = run_.spec().trimmed_mean_fraction();
    return std::make_unique<ShardedExchange>(options);
  }

  // Uploads a random global[0] of `values` values from node-0 and returns it.
  std::vector<float> InitModel(int64_t values, uint32_t seed = 3) {
    std::vector<float> global0 = RandomVector(values, seed);
    EXPECT_THAT(Client().InitModel(run_.run_id(), "node-0/0", credentials_.Get("node-0/0"), global0,
                                   Layout(values), kTimeout),
                IsOk());
    return global0;
  }

  void StartRun(const std::string& spec) {
    v1::StartRunRequest request;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
        absl::StrCat("model { builtin: \"mlp\" } chunk_bytes: 65536 min_shard_bytes: 0 ", spec),
        request.mutable_spec()));
    v1::StartRunResponse response;
    grpc::Status status = coordinator_->StartRun(Ctx().get(), request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    run_ = response.run();
    for (auto& [i, leader] : leaders_) {
      const std::string id = absl::StrCat("node-", i, "/0");
      leader.member =
          SyncMember{run_.run_id(), id, run_.spec().codec(), 1.0 + i, 1 + i, credentials_.Of(id)};
      leader.client = MakeClient(leader.serves ? leader.server.get() : nullptr);
    }
  }

  OuterOptimizer Outer() const {
    const v1::OuterOptimizerSpec& outer = run_.spec().outer_optimizer();
    return OuterOptimizer{outer.lr(), outer.momentum(), outer.nesterov()};
  }

  ChunkLayout Layout(int64_t values) const {
    return ChunkLayout::ForBytes(values, run_.spec().chunk_bytes());
  }

  ModelClient Client() { return ModelClient(Channel(), kToken); }

  // Expects `global` and `momentum` to be round `round` of the run as the coordinator vouches
  // for it (its recorded digest, what every fetch from the members is checked against): the
  // coordinator keeps no copy of a sharded run's model.
  void ExpectRecorded(const std::vector<float>& global, const std::vector<float>& momentum,
                      int64_t round) {
    absl::StatusOr<v1::ModelHeader> header =
        Client().FetchHolders("", kTimeout, /*include_momentum=*/true);
    ASSERT_THAT(header, IsOk());
    EXPECT_EQ(header->round(), round);
    EXPECT_EQ(
        header->digest(),
        ModelDigest(global, momentum, Layout(static_cast<int64_t>(global.size()))).with_momentum);
  }

  v1::CoordinatorStatus Status() {
    v1::CoordinatorStatus status;
    EXPECT_TRUE(coordinator_->GetStatus(Ctx().get(), v1::GetStatusRequest(), &status).ok());
    return status;
  }

  // Every node in `nodes` syncs params[k] against its globals[k] / momenta[k] in a thread,
  // claiming step steps[k] (default: round x 8).
  std::vector<absl::StatusOr<ExchangeResult>> SyncAll(const std::vector<int>& nodes, int64_t round,
                                                      const Vectors& params, Vectors& globals,
                                                      Vectors& momenta,
                                                      std::vector<int64_t> steps = {}) {
    steps.resize(nodes.size(), round * 8);
    std::vector<absl::StatusOr<ExchangeResult>> results(nodes.size(), absl::UnknownError(""));
    std::vector<std::thread> threads;
    for (size_t k = 0; k < nodes.size(); ++k) {
      threads.emplace_back([&, k] {
        Leader& leader = leaders_[nodes[k]];
        results[k] = leader.client->Run(leader.member,
                                        {round, steps[k], params[k], absl::MakeSpan(globals[k]),
                                         absl::MakeSpan(momenta[k]), kTimeout});
      });
    }
    for (auto& t : threads) t.join();
    return results;
  }

  // node-2's header for `round` of a `values`-long fp32 vector, for tests that play node-2
  // by hand on a raw Sync stream.
  v1::SyncRequest Node2Header(int64_t round, int64_t values) const {
    v1::SyncRequest request;
    v1::SyncHeader* header = request.mutable_header();
    header->set_run_id(run_.run_id());
    header->set_round(round);
    header->set_member_id("node-2/0");
    header->set_member_credential(credentials_.Get("node-2/0"));
    header->set_vector_length(values);
    header->set_codec(v1::CODEC_FP32);
    header->set_weight(1);
    header->set_num_workers(1);
    return request;
  }

  // params[k] = globals[k] + a small random step of node k in `round`.
  static Vectors Steps(const Vectors& globals, int64_t round) {
    Vectors params = globals;
    for (size_t k = 0; k < params.size(); ++k) {
      std::vector<float> step =
          RandomVector(static_cast<int64_t>(params[k].size()), 1000 * round + k, 0.01f);
      for (size_t i = 0; i < step.size(); ++i) params[k][i] += step[i];
    }
    return params;
  }

  std::string state_dir_;
  std::unique_ptr<CoordinatorServer> server_;
  std::unique_ptr<v1::Coordinator::Stub> coordinator_;
  std::map<int, Leader> leaders_;
  testing::MemberCredentials credentials_;
  v1::RunInfo run_;
};

class ShardedEquivalenceTest : public ShardedTest {
 public:
  Vectors members_momenta_;  // after the last Run
  // The star reference: the same deltas through StarExchange.
  std::vector<Vectors> Run(bool sharded, int nodes, int64_t values, int rounds,
                           const std::string& codec = "CODEC_FP32") {
    server_.reset();
    leaders_.clear();
    EXPECT_THAT(StartServer(), IsOk());
    for (int i = 0; i < nodes; ++i) JoinNode(i);
    StartRun(absl::StrCat(kDiloco, "codec: ", codec,
                          " exchange: ", sharded ? "EXCHANGE_SHARDED" : "EXCHANGE_STAR"));
    std::vector<float> global0 = InitModel(values, 7);
    Vectors globals(nodes, global0);
    Vectors momenta(nodes, std::vector<float>(static_cast<size_t>(values), 0.0f));
    std::vector<int> all;
    for (int i = 0; i < nodes; ++i) all.push_back(i);
    std::vector<Vectors> history;
    for (int64_t round = 1; round <= rounds; ++round) {
      Vectors params = Steps(globals, round);
      if (sharded) {
        for (auto& result : SyncAll(all, round, params, globals, momenta)) {
          EXPECT_THAT(result, IsOk());
        }
      } else {
        std::vector<std::thread> threads;
        for (int k = 0; k < nodes; ++k) {
          threads.emplace_back([&, k] {
            StarExchange star(Channel(), kToken);
            EXPECT_THAT(
                star.Run(leaders_[k].member,
                         {round, round * 8, params[k], absl::MakeSpan(globals[k]), {}, kTimeout}),
                IsOk());
          });
        }
        for (auto& t : threads) t.join();
      }
      history.push_back(globals);
    }
    members_momenta_ = momenta;
    return history;
  }
};

TEST_F(ShardedEquivalenceTest, ShardedGivesTheStarsModelAndEveryCopyIsBitIdentical) {
  // 70,001 values in chunks of 16,384: 5 chunks, the last one short, over 2, 3 and 4 owners
  // (4 owners of 5 chunks: ranges of 1, 1, 1 and 2 chunks). There each leader owns a range, so
  // those rounds go round the ring; 4 leaders over 40,000 values (3 chunks) leave one without a
  // range, so those rounds are all-to-all.
  for (auto [nodes, values] :
       std::vector<std::pair<int, int64_t>>{{2, 70'001}, {3, 70'001}, {4, 70'001}, {4, 40'000}}) {
    const bool ring = values > 3 * 16384;
    SCOPED_TRACE(absl::StrCat(nodes, " node leaders, ", values, " values"));
    std::vector<Vectors> star = Run(false, nodes, values, 3);
    std::vector<Vectors> sharded = Run(true, nodes, values, 3);
    ASSERT_EQ(sharded.size(), 3u);
    for (int round = 0; round < 3; ++round) {
      for (int k = 0; k < nodes; ++k) {
        EXPECT_EQ(
            std::memcmp(sharded[round][k].data(), sharded[round][0].data(), values * sizeof(float)),
            0)
            << "member " << k << " differs after round " << round + 1;
      }
      double max_diff = 0;
      for (int64_t i = 0; i < values; ++i) {
        max_diff = std::max<double>(max_diff, std::fabs(sharded[round][0][i] - star[round][0][i]));
      }
      EXPECT_LE(max_diff, 1e-6) << "round " << round + 1;
    }
    // What the coordinator vouches for (late joiners, restarts) is the members' copy.
    ASSERT_THAT(Client().FetchModel("", kTimeout),
                StatusIs(absl::StatusCode::kUnavailable, "keeps no copy"));
    ASSERT_EQ(members_momenta_.size(), static_cast<size_t>(nodes));
    ExpectRecorded(sharded[2][0], members_momenta_[0], 3);
    // The round's record says how it went.
    v1::CoordinatorStatus status = Status();
    const v1::RoundRecord& record = status.recent_rounds(status.recent_rounds_size() - 1);
    EXPECT_EQ(record.exchange(), v1::EXCHANGE_SHARDED);
    EXPECT_EQ(record.ring(), ring);
    EXPECT_EQ(record.members_size(), nodes);
    ASSERT_EQ(record.shards_size(), std::min<int>(nodes, Layout(values).num_chunks()));
    int64_t covered = 0;
    for (const v1::ShardRecord& shard : record.shards()) {
      EXPECT_EQ(shard.begin(), covered);
      covered = shard.end();
      EXPECT_EQ(shard.mean_bytes(), (shard.end() - shard.begin()) * 4);
    }
    EXPECT_EQ(covered, values);
    // The coordinator received no model bytes, whatever the number of members.
    EXPECT_EQ(record.bytes_received(), 0);
    EXPECT_EQ(record.bytes_sent(), 0);
  }
}

TEST_F(ShardedEquivalenceTest, LossyCodecsKeepEveryCopyBitIdentical) {
  constexpr int64_t kValues = 50'000;
  for (const char* codec : {"CODEC_BF16", "CODEC_FP16", "CODEC_INT8"}) {
    SCOPED_TRACE(codec);
    std::vector<Vectors> sharded = Run(true, 3, kValues, 3, codec);
    for (int round = 0; round < 3; ++round) {
      for (int k = 1; k < 3; ++k) {
        EXPECT_EQ(std::memcmp(sharded[round][k].data(), sharded[round][0].data(),
                              kValues * sizeof(float)),
                  0);
      }
    }
    ExpectRecorded(sharded[2][0], members_momenta_[0], 3);
    EXPECT_EQ(Status().recent_rounds(0).bytes_received(), 0);
  }
}

TEST_F(ShardedTest, MembersWithoutADataPlaneTakePartAndOwnNothing) {
  ASSERT_THAT(StartServer(), IsOk());
  JoinNode(0);
  JoinNode(1, /*serve=*/false);
  StartRun("");
  const int64_t values = 40'000;
  std::vector<float> global0 = InitModel(values);
  Vectors globals(2, global0), momenta(2);
  auto results = SyncAll({0, 1}, 1, Steps(globals, 1), globals, momenta);
  for (auto& result : results) ASSERT_THAT(result, IsOk());
  EXPECT_EQ(std::memcmp(globals[0].data(), globals[1].data(), values * sizeof(float)), 0);
  v1::CoordinatorStatus status = Status();
  ASSERT_EQ(status.recent_rounds(0).shards_size(), 1);
  EXPECT_EQ(status.recent_rounds(0).shards(0).owner_id(), "node-0/0");
}

TEST_F(ShardedTest, AnOwnerThatDiesMidRoundAbortsItAndTheNextRoundCommitsWithoutIt) {
  ASSERT_THAT(StartServer(), IsOk());
  for (int i = 0; i < 3; ++i) JoinNode(i);
  StartRun("round_deadline_seconds: 2");
  const int64_t values = 70'000;
  std::vector<float> global0 = InitModel(values);
  // node-2 sends its header, gets the layout (it owns a range) and dies: its data plane and
  // its coordinator stream go away together.
  leaders_[2].server->Shutdown();
  auto stub = v1::Averaging::NewStub(Channel());
  auto context = Ctx();
  auto stream = stub->Sync(context.get());
  std::thread dying([&] {
    ASSERT_TRUE(stream->Write(Node2Header(1, values)));
    v1::SyncResponse response;
    ASSERT_TRUE(stream->Read(&response));
    EXPECT_TRUE(response.has_header());
    EXPECT_EQ(response.header().shards_size(), 3);
    context->TryCancel();
  });
  Vectors globals(2, global0), momenta(2);
  const absl::Time start = absl::Now();
  auto results = SyncAll({0, 1}, 1, Steps(globals, 1), globals, momenta);
  dying.join();
  stream->Finish();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2 + 2));  // within the deadline (and a tick)
  for (auto& result : results) EXPECT_FALSE(result.ok());
  for (int k = 0; k < 2; ++k) {  // local weights kept
    EXPECT_EQ(std::memcmp(globals[k].data(), global0.data(), values * sizeof(float)), 0);
  }
  v1::CoordinatorStatus status = Status();
  ASSERT_GE(status.recent_rounds_size(), 1);
  EXPECT_EQ(status.recent_rounds(0).outcome(), v1::ROUND_OUTCOME_ABORTED);
  EXPECT_THAT(status.recent_rounds(0).reason(), HasSubstr("node-2/0"));
  EXPECT_EQ(status.run().round(), 0);

  // node-2 is still a live member (its lease has not expired), but never comes: the next
  // round is laid out without it at the deadline and commits.
  results = SyncAll({0, 1}, 1, Steps(globals, 2), globals, momenta);
  for (auto& result : results) {
    ASSERT_THAT(result, IsOk());
    EXPECT_THAT(result->members, ElementsAre("node-0/0", "node-1/0"));
  }
  EXPECT_EQ(std::memcmp(globals[0].data(), globals[1].data(), values * sizeof(float)), 0);
  status = Status();
  EXPECT_EQ(status.run().round(), 1);
  const v1::RoundRecord& committed = status.recent_rounds(status.recent_rounds_size() - 1);
  EXPECT_EQ(committed.outcome(), v1::ROUND_OUTCOME_COMMITTED);
  EXPECT_EQ(committed.shards_size(), 2);
  ASSERT_EQ(committed.dropped_size(), 1);
  EXPECT_EQ(committed.dropped(0).member_id(), "node-2/0");
}

// A hostile owner gets the layout, then sends what no owner may: each is refused naming the
// problem, the round it owns a range in aborts (members keep their weights, nothing is
// committed), and the members' next attempt, laid out without it at the deadline, commits.
TEST_F(ShardedTest, AHostileOwnersMessagesAreRefusedAndTheRoundCommitsWithoutIt) {
  ASSERT_THAT(StartServer(), IsOk());
  for (int i = 0; i < 3; ++i) JoinNode(i);
  // Four hostile rounds in a row, each to be refused for what it sent, not for the three before.
  StartRun("round_deadline_seconds: 2 suspend_after_failed_rounds: 5");
  const int64_t values = 3 * 16384;  // three 64 KiB chunks: one per owner
  std::vector<float> global0 = InitModel(values);
  struct Case {
    std::string what;
    // The hostile message, given the chunk node-2 owns and one it does not.
    std::function<v1::SyncRequest(int own, int other)> message;
    grpc::StatusCode code;
    std::string names;
    std::string abort_reason;  // the round's, as the status shows it
  };
  const std::string left = "owner node-2/0 left before every member held its range";
  const std::vector<Case> cases = {
      // Field 3 was an owner's mean: the coordinator takes no model bytes in sharded rounds.
      {"a mean for the coordinator",
       [&](int own, int) {
         v1::SyncRequest request;
         request.GetReflection()->MutableUnknownFields(&request)->AddLengthDelimited(
             3, std::string(64, 'x'));
         return request;
       },
       grpc::StatusCode::INVALID_ARGUMENT, "an empty message", left},
      {"a delivery without one digest per range",
       [&](int, int) {
         v1::SyncRequest request;
         request.mutable_delivered()->add_range_digests(1);
         request.mutable_delivered()->add_value_digests(1);
         return request;
       },
       grpc::StatusCode::INVALID_ARGUMENT, "delivered.range_digests: 1 digests for 3 ranges", left},
      {"a star round's delta chunk",
       [&](int own, int) {
         v1::SyncRequest request;
         request.mutable_chunk()->set_index(own);
         Encode(v1::CODEC_FP32, std::vector<float>(16384, 1.0f),
                request.mutable_chunk()->mutable_data());
         return request;
       },
       grpc::StatusCode::INVALID_ARGUMENT, "deltas go to the range owners", left},
      {"an unreachable report naming a member that owns nothing",
       [&](int, int) {
         v1::SyncRequest request;
         request.mutable_unreachable()->set_owner_id("nobody/0");
         return request;
       },
       grpc::StatusCode::INVALID_ARGUMENT, "nobody/0 owns no range", left},
  };
  Vectors globals(2, global0), momenta(2);
  // After three aborts in a row with the same members, rounds back off (1 s, then 2 s):
  // each case after the third waits for that first (docs/design.md, "Faults").
  absl::Duration backoff = absl::Seconds(1);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    SCOPED_TRACE(c.what);
    if (i >= 3) {
      absl::SleepFor(backoff + absl::Milliseconds(200));
      backoff *= 2;
    }
    auto stub = v1::Averaging::NewStub(Channel());
    auto context = Ctx();
    auto stream = stub->Sync(context.get());
    grpc::Status refused;
    std::thread hostile([&] {
      ASSERT_TRUE(stream->Write(Node2Header(1, values)));
      v1::SyncResponse response;
      ASSERT_TRUE(stream->Read(&response));
      ASSERT_TRUE(response.has_header());
      int own = -1;
      int other = -1;
      for (const v1::ShardRange& shard : response.header().shards()) {
        (shard.owner_id() == "node-2/0" ? own : other) = shard.begin_chunk();
      }
      ASSERT_GE(own, 0);
      ASSERT_GE(other, 0);
      stream->Write(c.message(own, other));
      while (stream->Read(&response)) {
      }
      refused = stream->Finish();
    });
    auto results = SyncAll({0, 1}, 1, Steps(globals, 1), globals, momenta);
    hostile.join();
    EXPECT_EQ(refused.error_code(), c.code) << refused.error_message();
    EXPECT_THAT(refused.error_message(), HasSubstr(c.names));
    for (auto& result : results) EXPECT_FALSE(result.ok());
    for (int k = 0; k < 2; ++k) {
      EXPECT_EQ(std::memcmp(globals[k].data(), global0.data(), values * sizeof(float)), 0);
    }
    const v1::CoordinatorStatus status = Status();
    EXPECT_EQ(status.run().round(), 0);
    ASSERT_GE(status.recent_rounds_size(), 1);
    const v1::RoundRecord& aborted = status.recent_rounds(status.recent_rounds_size() - 1);
    EXPECT_EQ(aborted.outcome(), v1::ROUND_OUTCOME_ABORTED);
    EXPECT_THAT(aborted.reason(), HasSubstr(c.abort_reason));  // at once, not at the deadline
  }
  absl::SleepFor(backoff + absl::Milliseconds(200));
  auto results = SyncAll({0, 1}, 1, Steps(globals, 2), globals, momenta);
  for (auto& result : results) {
    ASSERT_THAT(result, IsOk());
    EXPECT_THAT(result->members, ElementsAre("node-0/0", "node-1/0"));
  }
  EXPECT_EQ(std::memcmp(globals[0].data(), globals[1].data(), values * sizeof(float)), 0);
  EXPECT_EQ(Status().run().round(), 1);
}

// Issue 37, finding 3: an update that overflows (3e38 with weight 2) makes the owner of that
// range fail the round, which aborts, and nothing more: no member reads it as the run's end,
// and the round commits when tried again with sane deltas.
TEST_F(ShardedTest, AnUpdateThatOverflowsAbortsTheRoundButNotTheRun) {
  ASSERT_THAT(StartServer(), IsOk());
  for (int i = 0; i < 2; ++i) JoinNode(i);
  StartRun("codec: CODEC_BF16 round_deadline_seconds: 5");  // all-to-all: owners average
  const int64_t values = 2 * 16384;
  std::vector<float> global0 = InitModel(values);
  Vectors globals(2, global0), momenta(2, std::vector<float>());
  Vectors params = Steps(globals, 1);
  params[1][0] = 3e38f;  // node-1 weighs 2: the sum in node-0's range overflows fp32
  for (auto& result : SyncAll({0, 1}, 1, params, globals, momenta)) {
    EXPECT_THAT(result, StatusIs(absl::StatusCode::kAborted, ""));
  }
  EXPECT_EQ(Status().run().state(), v1::RUN_STATE_RUNNING);
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(std::memcmp(globals[k].data(), global0.data(), values * sizeof(float)), 0);
  }
  for (auto& result : SyncAll({0, 1}, 1, Steps(globals, 1), globals, momenta)) {
    EXPECT_THAT(result, IsOk());
  }
}

// Issue 37, finding 4: screening was refused in sharded mode, the default, and a poisoned
// delta moved every value. Each owner now screens its range, with no ring.
TEST_F(ShardedTest, OwnersScreenOutAPoisonedDelta) {
  ASSERT_THAT(StartServer(), IsOk());
  for (int i = 0; i < 3; ++i) JoinNode(i);
  StartRun("max_delta_norm_ratio: 10");
  const int64_t values = 3 * 16384;  // three owners
  std::vector<float> global0 = InitModel(values);
  Vectors globals(3, global0), momenta(3, std::vector<float>());
  Vectors params = Steps(globals, 1);
  for (int64_t i = 0; i < values; ++i)
    params[2][i] = global0[i] + 1000 * (params[2][i] - global0[i]);
  for (auto& result : SyncAll({0, 1, 2}, 1, params, globals, momenta)) ASSERT_THAT(result, IsOk());
  for (int64_t i = 0; i < values; ++i) {  // the weighted mean of node-0 (1) and node-1 (2)
    const float mean = ((params[0][i] - global0[i]) + 2 * (params[1][i] - global0[i])) / 3;
    ASSERT_NEAR(globals[0][i], global0[i] + mean, 1e-5) << i;
  }
  for (int k = 1; k < 3; ++k) {
    EXPECT_EQ(std::memcmp(globals[k].data(), globals[0].data(), values * sizeof(float)), 0);
  }
  EXPECT_FALSE(Status().recent_rounds(0).ring());
}

// The same with a trimmed mean: with three members and 1/3, each value's median delta.
TEST_F(ShardedTest, OwnersTakeTheTrimmedMeanOfEachValue) {
  ASSERT_THAT(StartServer(), IsOk());
  for (int i = 0; i < 3; ++i) JoinNode(i);
  StartRun("trimmed_mean_fraction: 0.34");
  const int64_t values = 3 * 16384;
  std::vector<float> global0 = InitModel(values);
  Vectors globals(3, global0), momenta(3, std::vector<float>());
  Vectors params = Steps(globals, 1);
  for (int64_t i = 0; i < values; i += 3) params[1][i] = 1e30f;  // poisoned, within fp32
  for (auto& result : SyncAll({0, 1, 2}, 1, params, globals, momenta)) ASSERT_THAT(result, IsOk());
  for (int64_t i = 0; i < values; ++i) {
    std::vector<float> deltas;
    for (int k = 0; k < 3; ++k) deltas.push_back(params[k][i] - global0[i]);
    std::sort(deltas.begin(), deltas.end());
    ASSERT_NEAR(globals[0][i], global0[i] + deltas[1], 1e-5) << i;
  }
  for (int k = 1; k < 3; ++k) {
    EXPECT_EQ(std::memcmp(globals[k].data(), globals[0].data(), values * sizeof(float)), 0);
  }
}

// One member of three claims a step far beyond the others': the round's global step is
// theirs, and the run (800 steps) goes on instead of ending as completed.
TEST_F(ShardedTest, OneMemberClaimingAHugeStepNeitherMovesTheGlobalStepNorEndsTheRun) {
  ASSERT_THAT(StartServer(), IsOk());
  for (int i = 0; i < 3; ++i) JoinNode(i);
  StartRun("total_steps: 800");
  const int64_t values = 3 * 16384;
  Vectors globals(3, InitModel(values)), momenta(3, std::vector<float>());
  for (auto& result :
       SyncAll({0, 1, 2}, 1, Steps(globals, 1), globals, momenta, {8, 8, int64_t{1} << 50})) {
    ASSERT_THAT(result, IsOk());
  }
  const v1::CoordinatorStatus status = Status();
  EXPECT_EQ(status.run().global_step(), 8);
  EXPECT_EQ(status.run().state(), v1::RUN_STATE_RUNNING);
}

TEST_F(ShardedTest, StaleAndLateMembersAdoptTheCommittedModelWithItsMomentum) {
  ASSERT_THAT(StartServer(), IsOk());
  for (int i = 0; i < 2; ++i) JoinNode(i);
  StartRun(kDiloco);
  const int64_t values = 30'000;
  std::vector<float> global0 = InitModel(values);
  Vectors globals(2, global0), momenta(2, std::vector<float>(values, 0.0f));
  for (int64_t round = 1; round <= 2; ++round) {
    for (auto& result : SyncAll({0, 1}, round, Steps(globals, round), globals, momenta)) {
      ASSERT_THAT(result, IsOk());
    }
  }
  // A member offering a committed round gets the structured answer.
  Vectors again = {globals[0]}, again_momentum = {momenta[0]};
  auto stale = SyncAll({0}, 2, again, again, again_momentum);
  ASSERT_THAT(stale[0], StatusIs(absl::StatusCode::kFailedPrecondition, "stale"));
  std::optional<v1::StaleRound> answer = StaleRoundOf(stale[0].status());
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->committed_round(), 2);
  EXPECT_EQ(answer->global_step(), 16);
  // A late joiner fetches global and momentum and takes part in the next round, which leaves
  // all three copies identical.
  JoinNode(2);
  leaders_[2].member =
      SyncMember{run_.run_id(), "node-2/0", run_.spec().codec(), 1, 1, credentials_.Of("node-2/0")};
  // (What it fetches from the others, checked against the coordinator's digest: tested in
  // ALateLeaderFetchesTheModelFromItsHoldersCheckedByDigest.)
  ExpectRecorded(globals[0], momenta[0], 2);
  globals.push_back(globals[0]);
  momenta.push_back(momenta[0]);
  for (auto& result : SyncAll({0, 1, 2}, 3, Steps(globals, 3), globals, momenta)) {
    ASSERT_THAT(result, IsOk());
  }
  for (int k = 1; k < 3; ++k) {
    EXPECT_EQ(std::memcmp(globals[k].data(), globals[0].data(), values * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(momenta[k].data(), momenta[0].data(), values * sizeof(float)), 0);
  }
}

// Issue 54: every member's copy of global[r] and its momentum is checked by digest before the
// round commits. A copy changed by one value (here one member's global, then another's
// momentum) aborts the round naming that member, who is told to fetch the model; nothing
// commits on unequal copies, and the next attempt commits with all of them equal.
TEST_F(ShardedTest, ACopyThatDiffersAbortsTheRoundNamingItsMember) {
  ASSERT_THAT(StartServer(), IsOk());
  for (int i = 0; i < 3; ++i) JoinNode(i);
  StartRun(kDiloco);
  const int64_t values = 100'000;
  std::vector<float> global0 = InitModel(values);
  Vectors globals(3, global0), momenta(3, std::vector<float>(values, 0.0f));
  for (auto& result : SyncAll({0, 1, 2}, 1, Steps(globals, 1), globals, momenta)) {
    ASSERT_THAT(result, IsOk());
  }
  int64_t round = 2;
  for (const auto& [diverging, in_momentum] : {std::pair{2, false}, std::pair{1, true}}) {
    SCOPED_TRACE(absl::StrCat("node-", diverging, in_momentum ? "'s momentum" : "'s global"));
    const std::string id = absl::StrCat("node-", diverging, "/0");
    std::vector<float>& corrupt = in_momentum ? momenta[diverging] : globals[diverging];
    corrupt[values / 2] = std::nextafter(corrupt[values / 2], 1e9f);
    const Vectors globals_before = globals, momenta_before = momenta;
    std::vector<absl::StatusOr<ExchangeResult>> results =
        SyncAll({0, 1, 2}, round, Steps(globals, round), globals, momenta);
    for (int k = 0; k < 3; ++k) {
      if (k == diverging) {
        // Told to fetch the committed model, as a stale member is.
        ASSERT_THAT(results[k], StatusIs(absl::StatusCode::kFailedPrecondition, "fetch"));
        std::optional<v1::StaleRound> stale = StaleRoundOf(results[k].status());
        ASSERT_TRUE(stale.has_value());
        EXPECT_EQ(stale->committed_round(), round - 1);
      } else {
        EXPECT_THAT(results[k], StatusIs(absl::StatusCode::kAborted, id));
      }
      // Nothing was applied anywhere.
      EXPECT_EQ(globals[k], globals_before[k]);
      EXPECT_EQ(momenta[k], momenta_before[k]);
    }
    v1::CoordinatorStatus status = Status();
    const v1::RoundRecord& record = status.recent_rounds(status.recent_rounds_size() - 1);
    EXPECT_EQ(record.outcome(), v1::ROUND_OUTCOME_ABORTED);
    EXPECT_THAT(record.reason(), HasSubstr(absl::StrCat("the digests of ", id)));
    EXPECT_EQ(status.run().round(), round - 1);
    // The member takes the committed model (from the others: what the coordinator vouches
    // for); the round then commits with every copy equal.
    const int holder = diverging == 0 ? 1 : 0;
    ExpectRecorded(globals[holder], momenta[holder], round - 1);
    globals[diverging] = globals[holder];
    momenta[diverging] = momenta[holder];
    for (auto& result : SyncAll({0, 1, 2}, round, Steps(globals, round), globals, momenta)) {
      ASSERT_THAT(result, IsOk());
    }
    for (int k = 1; k < 3; ++k) {
      EXPECT_EQ(std::memcmp(globals[k].data(), globals[0].data(), values * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(momenta[k].data(), momenta[0].data(), values * sizeof(float)), 0);
    }
    ++round;
  }
}

// Issue 54: the model lives with the members. A leader that joins late fetches the committed
// model (and momentum) from the leaders that hold it, a range from each, checked against the
// coordinator's digest; a holder whose copy differs is not believed.
TEST_F(ShardedTest, ALateLeaderFetchesTheModelFromItsHoldersCheckedByDigest) {
  ASSERT_THAT(StartServer(), IsOk());
  for (int i = 0; i < 2; ++i) JoinNode(i);
  StartRun(kDiloco);
  const int64_t values = 100'000;  // 7 chunks
  std::vector<float> start = RandomVector(values, 3);
  ModelClient client = Client();
  std::vector<std::unique_ptr<ModelFetcher>> fetchers;
  std::vector<std::unique_ptr<NodeLeader>> nodes;
  for (int i = 0; i < 3; ++i) {
    fetchers.push_back(std::make_unique<ModelFetcher>(
        ModelFetcher::Options{&client, kToken, nullptr, absl::StrCat("node-", i, "/0")}));
  }
  for (int i = 0; i < 2; ++i) {
    nodes.push_back(std::make_unique<NodeLeader>(
        &client, leaders_[i].client.get(), leaders_[i].member, Layout(values), kTimeout,
        FragmentPlan(), leaders_[i].held.get(), fetchers[i].get()));
  }
  Vectors params(3, start);
  ASSERT_THAT(nodes[0]->Start(absl::MakeSpan(params[0])), IsOk());
  ASSERT_THAT(nodes[1]->Start(absl::MakeSpan(params[1])), IsOk());  // from node-0's data plane
  for (int64_t round = 1; round <= 2; ++round) {
    std::vector<absl::Status> results(2);
    std::vector<std::thread> threads;
    for (int i = 0; i < 2; ++i) {
      threads.emplace_back([&, i] {
        params[i][static_cast<size_t>(i + round)] += 1.0f;
        results[static_cast<size_t>(i)] =
            nodes[static_cast<size_t>(i)]->Sync(absl::MakeSpan(params[i]), 8 * round);
      });
    }
    for (auto& t : threads) t.join();
    for (const absl::Status& s : results) ASSERT_THAT(s, IsOk());
  }
  // The reference: node-0's copy, which the coordinator vouches for.
  struct {
    std::vector<float> values, momentum;
    int64_t global_step;
  } reference{leaders_[0].held->values(), leaders_[0].held->momentum(),
              leaders_[0].held->global_step()};
  ASSERT_EQ(leaders_[0].held->round(), 2);
  ASSERT_FALSE(reference.momentum.empty());
  ExpectRecorded(reference.values, reference.momentum, 2);

  // node-2 joins now: both others hold round 2.
  JoinNode(2);
  leaders_[2].member = SyncMember{run_.run_id(), "node-2/0", run_.spec().codec(),
                                  3.0,           3,          credentials_.Of("node-2/0")};
  auto fetched = fetchers[2]->Fetch("", kTimeout, /*include_momentum=*/true);
  ASSERT_THAT(fetched, IsOk());
  EXPECT_EQ(fetched->source, "node-0/0, node-1/0");
  EXPECT_EQ(fetched->model.round, 2);
  EXPECT_EQ(fetched->model.global_step, reference.global_step);
  EXPECT_EQ(fetched->model.values, reference.values);
  EXPECT_EQ(fetched->model.momentum, reference.momentum);

  // An operator's fetch (localsgdctl fetch, export_model, Client.fetch_model: no member id,
  // no momentum) comes from the holders too.
  const ModelFetcher operators({&client, kToken, nullptr, /*member_id=*/""});
  auto fetched_by_operator = operators.Fetch("", kTimeout, /*include_momentum=*/false);
  ASSERT_THAT(fetched_by_operator, IsOk());
  EXPECT_EQ(fetched_by_operator->source, "node-0/0, node-1/0");
  EXPECT_EQ(fetched_by_operator->model.values, reference.values);
  EXPECT_TRUE(fetched_by_operator->model.momentum.empty());

  // A holder whose copy differs by one value (a bug, a flipped bit, a liar) is not believed:
  // its range comes from the next holder.
  leaders_[1].held->Commit(2, reference.global_step,
                           [&] { leaders_[1].held->values()[values - 1] += 1.0f; });
  fetched = fetchers[2]->Fetch("", kTimeout, /*include_momentum=*/true);
  ASSERT_THAT(fetched, IsOk());
  EXPECT_EQ(fetched->model.values, reference.values);
  EXPECT_EQ(fetched->model.momentum, reference.momentum);
  // With no holder left whose copy is right, nothing is adopted: the fetch fails, naming why
  // (UNAVAILABLE while the run runs: a holder may come back, or a checkpoint be offered).
  leaders_[0].held->Commit(2, reference.global_step,
                           [&] { leaders_[0].held->values()[0] += 1.0f; });
  EXPECT_THAT(fetchers[2]->Fetch("", kTimeout, /*include_momentum=*/true),
              StatusIs(absl::StatusCode::kUnavailable, "keeps no copy"));

  // A holder asked for another round says so.
  v1::FetchRangeRequest request;
  request.set_run_id(run_.run_id());
  request.set_round(1);
  request.set_chunk_values(Layout(values).chunk_values);
  request.set_end_chunk(1);
  auto stub = v1::DataPlane::NewStub(
      grpc::CreateChannel(leaders_[0].server->address(), grpc::InsecureChannelCredentials()));
  auto context = Ctx();
  auto stream = stub->FetchRange(context.get(), request);
  v1::FetchModelResponse response;
  while (stream->Read(&response)) {
  }
  grpc::Status refused = stream->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(refused.error_message(), HasSubstr("holds round 2"));
}

// Issue 12, finding 2: a node still training when the run ends is told so at its next sync,
// takes the run's final model (the one the coordinator vouches for) and stops, instead of
// training on alone with syncs refused.
TEST_F(ShardedTest, ANodeBehindWhenTheRunEndsTakesTheFinalModelAndStops) {
  ASSERT_THAT(StartServer(), IsOk());
  for (int i = 0; i < 2; ++i) JoinNode(i);
  StartRun("total_steps: 16 round_deadline_seconds: 1");
  const int64_t values = 30'000;
  std::vector<float> start = RandomVector(values, 3);
  ModelClient client = Client();
  std::vector<std::unique_ptr<ModelFetcher>> fetchers;
  std::vector<std::unique_ptr<NodeLeader>> nodes;
  for (int i = 0; i < 2; ++i) {
    fetchers.push_back(std::make_unique<ModelFetcher>(
        ModelFetcher::Options{&client, kToken, nullptr, absl::StrCat("node-", i, "/0")}));
    nodes.push_back(std::make_unique<NodeLeader>(
        &client, leaders_[i].client.get(), leaders_[i].member, Layout(values), kTimeout,
        FragmentPlan(), leaders_[i].held.get(), fetchers[i].get()));
  }
  Vectors params(2, start);
  ASSERT_THAT(nodes[0]->Start(absl::MakeSpan(params[0])), IsOk());
  ASSERT_THAT(nodes[1]->Start(absl::MakeSpan(params[1])), IsOk());
  // Round 1 together at step 8.
  std::vector<absl::Status> first(2);
  {
    std::vector<std::thread> threads;
    for (int i = 0; i < 2; ++i) {
      threads.emplace_back([&, i] {
        params[i][i] += 1.0f;
        first[i] = nodes[i]->Sync(absl::MakeSpan(params[i]), 8);
      });
    }
    for (auto& t : threads) t.join();
  }
  for (const absl::Status& s : first) ASSERT_THAT(s, IsOk());
  // Round 2 at step 16: node-1 is late, so node-0's round commits without it at the deadline
  // and the run completes (16 of 16 steps).
  params[0][5] += 1.0f;
  ASSERT_THAT(nodes[0]->Sync(absl::MakeSpan(params[0]), 16), IsOk());
  EXPECT_EQ(Status().run().state(), v1::RUN_STATE_COMPLETED);
  // node-1 comes to its step 16: the run has ended; it takes the final model.
  params[1][7] += 1.0f;
  absl::Status late = nodes[1]->Sync(absl::MakeSpan(params[1]), 16);
  EXPECT_THAT(late, StatusIs(absl::StatusCode::kOutOfRange, "the run ended"));
  EXPECT_EQ(nodes[1]->global_step(), 16);
  EXPECT_EQ(std::memcmp(params[1].data(), params[0].data(), values * sizeof(float)), 0);
  ExpectRecorded(params[0], {}, 2);
}

TEST_F(ShardedTest, RestartedCoordinatorResumesInShardedMode) {
  state_dir_ = std::string(std::getenv("TEST_TMPDIR")) + "/sharded-restart";
  ASSERT_THAT(StartServer(), IsOk());
  for (int i = 0; i < 2; ++i) JoinNode(i);
  StartRun(kDiloco);
  const int64_t values = 30'000;
  std::vector<float> global0 = InitModel(values);
  Vectors globals(2, global0), momenta(2, std::vector<float>(values, 0.0f));
  for (auto& result : SyncAll({0, 1}, 1, Steps(globals, 1), globals, momenta)) {
    ASSERT_THAT(result, IsOk());
  }
  server_->Shutdown();
  server_.reset();
  ASSERT_THAT(StartServer(), IsOk());  // members and the data-plane addresses are restored
  for (auto& [i, leader] : leaders_) leader.client = MakeClient(leader.server.get());
  EXPECT_EQ(Status().members(0).data_address(), leaders_[0].server->address());
  for (auto& result : SyncAll({0, 1}, 2, Steps(globals, 2), globals, momenta)) {
    ASSERT_THAT(result, IsOk());
  }
  // The restarted coordinator knew round 1's digests from its run record (no model.bin for a
  // sharded run): round 2 committed on the members' copies, and it vouches for them.
  EXPECT_EQ(std::memcmp(globals[1].data(), globals[0].data(), values * sizeof(float)), 0);
  ExpectRecorded(globals[0], momenta[1], 2);
  EXPECT_FALSE(std::filesystem::exists(state_dir_ + "/model.bin"));
}

// Issue 37, finding 6: the data plane checked the run token only, so any member could send
// deltas to an owner in another member's name. Each stream now carries the tag the coordinator
// made for it under the owner's key (issue 50), which no member can make.
TEST_F(ShardedTest, AMemberCannotSendDeltasToAnOwnerInAnothersName) {
  ASSERT_THAT(StartServer(), IsOk());
  JoinNode(0);
  JoinNode(1);
  JoinNode(2, /*serve=*/false);  // node-2, played by hand below, owns nothing
  StartRun("round_deadline_seconds: 2");
  const int64_t values = 2 * 16384;
  std::vector<float> global0 = InitModel(values);
  std::vector<grpc::Status> forged;
  std::thread hostile([&] {
    auto stub = v1::Averaging::NewStub(Channel());
    auto context = Ctx();
    auto sync = stub->Sync(context.get());
    ASSERT_TRUE(sync->Write(Node2Header(1, values)));
    v1::SyncResponse layout;
    ASSERT_TRUE(sync->Read(&layout));
    ASSERT_TRUE(layout.has_header());
    const v1::RoundHeader& header = layout.header();
    ASSERT_EQ(header.stream_tags_size(), header.members_size());
    const v1::ShardRange& range = header.shards(0);
    // In node-1's name: with no tag, with a tag made under node-2's own key, and with node-2's
    // own tag for its stream to that owner.
    const int owner_slot = static_cast<int>(
        std::find(header.members().begin(), header.members().end(), range.owner_id()) -
        header.members().begin());
    for (int attempt = 0; attempt < 3; ++attempt) {
      v1::ReduceRequest request;
      v1::ReduceHeader* reduce = request.mutable_header();
      reduce->set_run_id(run_.run_id());
      reduce->set_round(1);
      reduce->set_attempt(header.attempt());
      reduce->set_member_id("node-1/0");
      if (attempt == 1) {
        reduce->set_member_tag(DataPlaneTag(
            DataPlaneKey(credentials_.Get("node-2/0")),
            DataPlaneStream{run_.run_id(), 1, header.attempt(), "node-1/0", range.owner_id()}));
      } else if (attempt == 2) {
        reduce->set_member_tag(header.stream_tags(owner_slot));
      }
      auto data = v1::DataPlane::NewStub(
          grpc::CreateChannel(range.address(), grpc::InsecureChannelCredentials()));
      auto data_context = Ctx();
      auto stream = data->Reduce(data_context.get());
      stream->Write(request);
      v1::ReduceRequest chunk;
      chunk.mutable_chunk()->set_index(range.begin_chunk());
      Encode(v1::CODEC_FP32, std::vector<float>(16384, 1e6f),
             chunk.mutable_chunk()->mutable_data());
      stream->Write(chunk);
      stream->WritesDone();
      v1::ReduceResponse response;
      while (stream->Read(&response)) {
      }
      forged.push_back(stream->Finish());
    }
    context->TryCancel();  // node-2 leaves the round: the owners stop waiting for it
    sync->Finish();
  });
  Vectors globals(2, global0), momenta(2);
  Vectors params = Steps(globals, 1);
  auto results = SyncAll({0, 1}, 1, params, globals, momenta);
  hostile.join();
  ASSERT_EQ(forged.size(), 3u);
  for (const grpc::Status& status : forged) {
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr("member_tag"));
  }
  for (auto& result : results) {
    ASSERT_THAT(result, IsOk());
    EXPECT_THAT(result->members, ElementsAre("node-0/0", "node-1/0"));
  }
  for (int64_t i = 0; i < values; ++i) {  // node-0 weighs 1, node-1 2: nothing of node-2's
    const float mean = ((params[0][i] - global0[i]) + 2 * (params[1][i] - global0[i])) / 3;
    ASSERT_NEAR(globals[0][i], global0[i] + mean, 1e-5) << i;
  }
}

TEST_F(ShardedTest, TheDataPlaneRefusesAMissingOrWrongToken) {
  ASSERT_THAT(StartServer(), IsOk());
  JoinNode(0);
  auto stub = v1::DataPlane::NewStub(
      grpc::CreateChannel(leaders_[0].server->address(), grpc::InsecureChannelCredentials()));
  for (const char* token : {"", "wrong"}) {
    auto context = AuthorizedContext(token, kTimeout);
    auto stream = stub->Reduce(context.get());
    v1::ReduceRequest request;
    request.mutable_header()->set_run_id("r");
    stream->Write(request);
    v1::ReduceResponse response;
    while (stream->Read(&response)) {
    }
    grpc::Status status = stream->Finish();
    EXPECT_EQ(status.error_code(), *token == '\0' ? grpc::StatusCode::UNAUTHENTICATED
                                                  : grpc::StatusCode::PERMISSION_DENIED);
  }
}

// Under mutual TLS a client without a certificate never reaches the data plane; one with a
// certificate from the CA gets through the handshake to the token and request checks.
TEST_F(ShardedTest, TheDataPlaneUnderMutualTlsRefusesAClientWithoutACertificate) {
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/certs");
  const std::string script =
      absl::StrCat(std::getenv("TEST_SRCDIR"), "/", std::getenv("TEST_WORKSPACE"),
                   "/tests/testutil/make_certs.sh");
  ASSERT_EQ(std::system(absl::StrCat("bash ", script, " ", dir).c_str()), 0);
  auto file = [&](const char* name) { return absl::StrCat(dir, "/", name); };
  DataPlaneServer::Options options;
  options.token = kToken;
  options.tls = ServerTls{file("server.pem"), file("server.key"), file("ca.pem")};
  auto server = DataPlaneServer::Start(options);
  ASSERT_THAT(server, IsOk());
  auto call = [&](const ClientTls& tls) {
    auto credentials = MakeChannelCredentials(tls);
    EXPECT_THAT(credentials, IsOk());
    auto stub = v1::DataPlane::NewStub(grpc::CreateChannel((*server)->address(), *credentials));
    auto context = AuthorizedContext(kToken, absl::Seconds(10));
    auto stream = stub->Reduce(context.get());
    v1::ReduceRequest request;
    request.mutable_chunk()->set_index(0);  // not a header: refused past TLS and the token
    stream->Write(request);
    stream->WritesDone();
    v1::ReduceResponse response;
    while (stream->Read(&response)) {
    }
    return stream->Finish();
  };
  grpc::Status without = call(ClientTls{file("ca.pem"), "", ""});
  EXPECT_EQ(without.error_code(), grpc::StatusCode::UNAVAILABLE) << without.error_message();
  grpc::Status rogue =
      call(ClientTls{file("ca.pem"), file("rogue-client.pem"), file("rogue-client.key")});
  EXPECT_EQ(rogue.error_code(), grpc::StatusCode::UNAVAILABLE) << rogue.error_message();
  grpc::Status with = call(ClientTls{file("ca.pem"), file("client.pem"), file("client.key")});
  EXPECT_EQ(with.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << with.error_message();
  EXPECT_THAT(with.error_message(), HasSubstr("header"));
}

TEST_F(ShardedTest, AJoinWithABadDataAddressIsRefusedNamingTheField) {
  ASSERT_THAT(StartServer(), IsOk());
  for (const char* bad : {"no-port", "host:0", "a b:1"}) {
    v1::JoinRequest request;
    request.mutable_identity()->set_node_name("node-9");
    request.mutable_identity()->set_local_world_size(1);
    request.set_data_address(bad);
    v1::JoinResponse response;
    grpc::Status status = Join(request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad;
    EXPECT_THAT(status.error_message(), HasSubstr("data_address")) << bad;
  }
  // A wildcard host becomes the address the Join came from.
  v1::JoinRequest request;
  request.mutable_identity()->set_node_name("node-9");
  request.mutable_identity()->set_local_world_size(1);
  request.set_data_address("0.0.0.0:4567");
  v1::JoinResponse response;
  ASSERT_TRUE(Join(request, &response).ok());
  EXPECT_EQ(Status().members(0).data_address(), "127.0.0.1:4567");
}

// Finding 2 of issue 37: a leader whose data address points nowhere sends its header and gets
// a range; the others cannot reach it and say so, and the round aborts. After three such
// rounds it sits out (its header is refused, naming why) and the others' rounds commit without
// it, where before every round aborted for as long as it stayed.
TEST_F(ShardedTest, ALeaderWhoseDataAddressPointsNowhereSitsOutAndTheOthersCommit) {
  ASSERT_THAT(StartServer(), IsOk());
  for (int i = 0; i < 2; ++i) JoinNode(i);
  v1::JoinRequest join;
  join.mutable_identity()->set_node_name("node-2");
  join.mutable_identity()->set_local_world_size(1);
  join.set_data_address("127.0.0.1:1");  // nothing listens there
  v1::JoinResponse joined;
  ASSERT_TRUE(Join(join, &joined).ok());
  StartRun("round_deadline_seconds: 5");
  const int64_t values = 70'000;
  std::vector<float> global0 = InitModel(values);
  Vectors globals(2, global0), momenta(2);
  auto stub = v1::Averaging::NewStub(Channel());
  // node-2's attempt at round 1: its header, then whatever the coordinator answers; the
  // status its stream ends with.
  auto node2 = [&] {
    auto context = Ctx();
    auto stream = stub->Sync(context.get());
    stream->Write(Node2Header(1, values));
    v1::SyncResponse response;
    while (stream->Read(&response)) {
    }
    return stream->Finish();
  };
  for (int attempt = 1; attempt <= 3; ++attempt) {
    grpc::Status ended;
    std::thread broken([&] { ended = node2(); });
    auto results = SyncAll({0, 1}, 1, Steps(globals, 1), globals, momenta);
    broken.join();
    for (auto& result : results) EXPECT_FALSE(result.ok()) << attempt;
    EXPECT_EQ(ended.error_code(), grpc::StatusCode::ABORTED) << attempt;
    const v1::RoundRecord last = Status().recent_rounds(Status().recent_rounds_size() - 1);
    EXPECT_EQ(last.outcome(), v1::ROUND_OUTCOME_ABORTED);
    EXPECT_THAT(last.reason(), HasSubstr("could not exchange with owner node-2/0"));
  }
  grpc::Status refused = node2();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(refused.error_message(), HasSubstr("suspended from rounds"));
  auto results = SyncAll({0, 1}, 1, Steps(globals, 1), globals, momenta);
  for (auto& result : results) {
    ASSERT_THAT(result, IsOk());
    EXPECT_THAT(result->members, ElementsAre("node-0/0", "node-1/0"));
  }
  v1::CoordinatorStatus status = Status();
  EXPECT_EQ(status.run().round(), 1);
  const v1::RoundRecord& committed = status.recent_rounds(status.recent_rounds_size() - 1);
  ASSERT_EQ(committed.suspended_size(), 1);
  EXPECT_EQ(committed.suspended(0).member_id(), "node-2/0");
  bool event = false;
  for (const v1::Event& e : status.events()) event |= e.kind() == "member_suspended";
  EXPECT_TRUE(event);
}

// Finding 5 of issue 37: a star member that never reads its answers left one stream open per
// round, each holding that round's update (the coordinator grew by about a model a round). Its
// next header ends the stream before it, so it holds one round's update at most.
TEST_F(ShardedTest, AStarMembersNextStreamEndsItsUnreadOne) {
  ASSERT_THAT(StartServer(), IsOk());
  for (int i = 0; i < 3; ++i) JoinNode(i, /*serve=*/false);
  StartRun("exchange: EXCHANGE_STAR min_workers: 2");
  // 16 MB: more than the client's transport takes in for a stream nobody reads.
  const int64_t values = 4 << 20;
  std::vector<float> global0 = InitModel(values);
  const ChunkLayout layout = Layout(values);
  // The deaf stream has a connection of its own whose windows stay at their initial size: on a
  // connection shared with the star members' traffic, BDP probing may grow them past 16 MB.
  grpc::ChannelArguments deaf_args;
  deaf_args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  deaf_args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto stub = v1::Averaging::NewStub(grpc::CreateCustomChannel(
      server_->grpc_address(), grpc::InsecureChannelCredentials(), deaf_args));
  auto header = [&](int64_t round) {
    v1::SyncRequest request = Node2Header(round, values);
    request.mutable_header()->set_step(8 * round);
    return request;
  };
  auto deaf_context = Ctx();
  auto deaf = stub->Sync(deaf_context.get());
  ASSERT_TRUE(deaf->Write(header(1)));
  for (int c = 0; c < layout.num_chunks(); ++c) {
    v1::SyncRequest chunk;
    chunk.mutable_chunk()->set_index(c);
    Encode(v1::CODEC_FP32, std::vector<float>(static_cast<size_t>(layout.size(c)), 0.0f),
           chunk.mutable_chunk()->mutable_data());
    ASSERT_TRUE(deaf->Write(chunk));
  }
  Vectors globals(2, global0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 2; ++k) {
    threads.emplace_back([&, k] {
      StarExchange star(Channel(), kToken);
      EXPECT_THAT(
          star.Run(leaders_[k].member, {1, 8, global0, absl::MakeSpan(globals[k]), {}, kTimeout}),
          IsOk());
    });
  }
  for (auto& t : threads) t.join();
  // Round 2: the deaf member's next stream.
  auto next_context = Ctx();
  auto next = stub->Sync(next_context.get());
  ASSERT_TRUE(next->Write(header(2)));
  v1::SyncResponse response;
  ASSERT_TRUE(next->Read(&response));
  EXPECT_TRUE(response.has_header());
  bool committed = false;
  while (deaf->Read(&response)) committed |= response.has_commit();
  grpc::Status ended = deaf->Finish();
  EXPECT_FALSE(committed);
  EXPECT_EQ(ended.error_code(), grpc::StatusCode::CANCELLED) << ended.error_message();
  next_context->TryCancel();
  next->Finish();
}

}  // namespace
}  // namespace localsgd
