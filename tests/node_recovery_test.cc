// A node of three ranks (threads, Gloo) whose leader syncs with a real coordinator on
// 127.0.0.1:0 loses a rank in the middle of a sync: the rank takes part in the all-reduce and
// dies before the broadcast, while the leader syncs. A non-leader: whichever ranks the
// broadcast then reaches, the two left re-form, settle on the leader's step and result, and
// go on. The leader: the two left re-form, local rank 1 takes the node's lead at the
// coordinator in its place (which drops the dead leader at once, lease or not), takes the
// committed model, and the node goes on. Either way, after the last round both hold the
// coordinator's global model, at the same step.
#include <google/protobuf/text_format.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <torch/types.h>

#include <cstdlib>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "coordinator/coordinator_server.h"
#include "exchange/model_client.h"
#include "exchange/star_exchange.h"
#include "gtest/gtest.h"
#include "proto/localsgd/v1/coordinator.grpc.pb.h"
#include "tests/testutil/member_credentials.h"
#include "worker/hierarchical_averager.h"
#include "worker/intra_node_averager.h"
#include "worker/node_group.h"
#include "worker/node_leader.h"

namespace localsgd {
namespace {

constexpr char kToken[] = "recovery-token";
constexpr int64_t kValues = 70'000;
constexpr int kSteps = 8;
constexpr int64_t kLastStep = 3 * kSteps;
constexpr absl::Duration kTimeout = absl::Seconds(30);

struct Rank {
  int64_t step = 0;
  absl::Status health;
  at::Tensor params;
};

class NodeRecoveryTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    CoordinatorServer::Options options;
    options.grpc_address = "127.0.0.1:0";
    options.http_address = "";
    options.token = kToken;
    auto server = CoordinatorServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    auto stub = v1::Coordinator::NewStub(Channel());
    // The node's three ranks join, as workers do (its leader stands for the ranks that did).
    for (int rank = 2; rank >= 0; --rank) {
      v1::JoinRequest join;
      join.mutable_identity()->set_node_name("node-0");
      join.mutable_identity()->set_local_rank(rank);
      join.mutable_identity()->set_local_world_size(3);
      v1::JoinResponse joined;
      ASSERT_TRUE(stub->Join(Ctx().get(), join, &joined).ok());
      credentials_.Keep(joined);
    }
    v1::StartRunRequest start;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
        R"(model { builtin: "mlp" } chunk_bytes: 65536 min_workers: 1 exchange: EXCHANGE_STAR)",
        start.mutable_spec()));
    v1::StartRunResponse started;
    ASSERT_TRUE(stub->StartRun(Ctx().get(), start, &started).ok());
    run_id_ = started.run().run_id();
  }

  std::shared_ptr<grpc::Channel> Channel() {
    return grpc::CreateChannel(server_->grpc_address(), grpc::InsecureChannelCredentials());
  }

  std::unique_ptr<grpc::ClientContext> Ctx() { return AuthorizedContext(kToken, kTimeout); }

  std::unique_ptr<CoordinatorServer> server_;
  std::string run_id_;
  testing::MemberCredentials credentials_;
};

TEST_P(NodeRecoveryTest, RankDyingDuringTheLeadersSyncLeavesTheOthersAgreeing) {
  const int dead = GetParam();
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/node-", dead);
  ModelClient client(Channel(), kToken);
  std::vector<Rank> ranks(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      Rank& me = ranks[r];
      auto group =
          NodeGroup::Form(dir, r, 3, kTimeout,
                          [](const std::string& store, int rank, int size, std::function<bool()>) {
                            return MakeGlooAverager(store, rank, size, kTimeout);
                          });
      ASSERT_TRUE(group.ok()) << group.status();
      StarExchange exchange(Channel(), kToken);  // this rank's, should it lead
      std::unique_ptr<NodeLeader> leader;
      if (r == 0) {
        leader = std::make_unique<NodeLeader>(
            &client, &exchange,
            SyncMember{run_id_, "node-0/0", v1::CODEC_FP32, 3, 3, credentials_.Of("node-0/0")},
            ChunkLayout::ForBytes(kValues, 65536), kTimeout);
      }
      // Taking over from a dead leader, as the worker does it: join as the node's leader in
      // its place, then sync as the node's member.
      auto take_lead = [&](int dead_rank) -> absl::StatusOr<NodeLeader*> {
        v1::JoinRequest join;
        join.mutable_identity()->set_node_name("node-0");
        join.mutable_identity()->set_local_rank(r);
        join.mutable_identity()->set_local_world_size(3);
        join.set_node_leader(true);
        join.set_replaces(absl::StrCat("node-0/", dead_rank));
        v1::JoinResponse joined;
        grpc::Status s = v1::Coordinator::NewStub(Channel())->Join(Ctx().get(), join, &joined);
        if (!s.ok()) return absl::UnavailableError(s.error_message());
        credentials_.Keep(joined);
        const int left = static_cast<int>((*group)->members().size());
        leader = std::make_unique<NodeLeader>(
            &client, &exchange,
            SyncMember{run_id_, joined.worker_id(), v1::CODEC_FP32, static_cast<double>(left), left,
                       credentials_.Of(joined.worker_id())},
            ChunkLayout::ForBytes(kValues, 65536), kTimeout);
        return leader.get();
      };
      HierarchicalAverager averager(group->get(), leader.get(), take_lead);
      torch::manual_seed(r);
      me.params = torch::randn({kValues});
      ASSERT_TRUE(averager.Start({me.params}).ok());
      if (r == dead) {
        // Takes part in the first all-reduce, then dies while the leader syncs.
        at::Tensor copy = me.params.clone();
        ASSERT_TRUE((*group)->averager().AllReduceMean(copy).ok());
        group->reset();
        return;
      }
      // Training as Train() does it: a step moved by the averager is followed.
      while (me.step < kLastStep) {
        me.step += kSteps;
        me.params.add_(0.01 * (r + 1));
        (void)averager.Average({me.params}, /*fragment=*/0, &me.step);
        ASSERT_TRUE(averager.Health().ok()) << averager.Health();
      }
    });
  }
  for (auto& t : threads) t.join();
  absl::StatusOr<ModelClient::Model> global = client.FetchModel(run_id_, kTimeout);
  ASSERT_TRUE(global.ok()) << global.status();
  EXPECT_EQ(global->global_step, kLastStep);
  const at::Tensor expected = torch::from_blob(global->values.data(), {kValues}).clone();
  for (int r = 0; r < 3; ++r) {
    if (r == dead) continue;
    EXPECT_EQ(ranks[r].step, kLastStep) << r;
    EXPECT_TRUE(torch::equal(ranks[r].params, expected)) << "rank " << r << " differs";
  }
  // The node's member of the rounds: local rank 0 unless it died, then local rank 1, and the
  // dead leader is gone from the coordinator at once (its lease, 15 s, has not run out).
  v1::CoordinatorStatus status;
  ASSERT_TRUE(v1::Coordinator::NewStub(Channel())
                  ->GetStatus(Ctx().get(), v1::GetStatusRequest(), &status)
                  .ok());
  std::vector<std::string> leaders, members;
  for (const v1::MemberStatus& m : status.members()) {
    members.push_back(m.worker_id());
    if (m.node_leader()) leaders.push_back(m.worker_id());
  }
  EXPECT_EQ(leaders, std::vector<std::string>{dead == 0 ? "node-0/1" : "node-0/0"});
  if (dead == 0) {
    EXPECT_EQ(members, (std::vector<std::string>{"node-0/1", "node-0/2"}));
  }
  const v1::RoundRecord& last = status.recent_rounds(status.recent_rounds_size() - 1);
  EXPECT_EQ(last.members(0), dead == 0 ? "node-0/1" : "node-0/0");
}

// Rank 1 dead: the leader's broadcast fails on it. Rank 2 dead: rank 1 may receive the
// broadcast and train on while the leader re-forms, then roll back to the leader's step.
// Rank 0 dead: the leader itself, before it synced.
INSTANTIATE_TEST_SUITE_P(DeadRank, NodeRecoveryTest, ::testing::Values(0, 1, 2));

}  // namespace
}  // namespace localsgd
