// The worker's CoordinatorClient against a real coordinator in this process (gRPC on a free
// port): joining, heartbeats carrying progress, waiting for a run, claiming a node's lead,
// rejoining a coordinator that forgot it, leaving; and the failures: a wrong token, an
// unreachable address, a stop while retrying. One test uses a fake coordinator whose
// heartbeats are slow: a periodic heartbeat must not overtake the final report.
#include "worker/coordinator_client.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "common/mutex.h"
#include "coordinator/coordinator_server.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/localsgd/v1/coordinator.grpc.pb.h"
#include "tests/testutil/status_matchers.h"
#include "tests/testutil/wait_for.h"

namespace localsgd {
namespace {

using ::localsgd::testing::IsOk;
using ::localsgd::testing::StatusIs;

constexpr char kToken[] = "client-test-token";

class CoordinatorClientTest : public ::testing::Test {
 protected:
  void SetUp() override { StartServer("127.0.0.1:0"); }

  void StartServer(const std::string& address) {
    CoordinatorServer::Options options;
    options.grpc_address = address;
    options.http_address = "";
    options.token = kToken;
    options.lease_timeout = absl::Seconds(5);
    options.heartbeat_interval = absl::Milliseconds(100);
    absl::StatusOr<std::unique_ptr<CoordinatorServer>> server = CoordinatorServer::Start(options);
    ASSERT_THAT(server, IsOk());
    server_ = std::move(*server);
  }

  CoordinatorClient::Options ClientOptions(const std::string& node = "node-a") {
    CoordinatorClient::Options options;
    options.address = server_->grpc_address();
    options.token = kToken;
    options.identity.set_node_name(node);
    options.identity.set_local_rank(0);
    options.identity.set_local_world_size(1);
    options.hostname = node;
    options.connect_timeout = absl::Seconds(10);
    return options;
  }

  v1::CoordinatorStatus Status() { return server_->control_plane()->Status(); }

  const v1::MemberStatus* FindMember(const v1::CoordinatorStatus& status, const std::string& id) {
    for (const v1::MemberStatus& m : status.members()) {
      if (m.worker_id() == id) return &m;
    }
    return nullptr;
  }

  void StartRun() {
    v1::StartRunRequest request;
    request.mutable_spec()->mutable_model()->set_builtin("mlp");
    request.mutable_spec()->set_min_workers(1);
    ASSERT_THAT(server_->control_plane()->StartRun(request), IsOk());
  }

  std::unique_ptr<CoordinatorServer> server_;
};

TEST_F(CoordinatorClientTest, JoinsAndHeartbeatsCarryItsProgress) {
  absl::StatusOr<std::unique_ptr<CoordinatorClient>> client =
      CoordinatorClient::Connect(ClientOptions());
  ASSERT_THAT(client, IsOk());
  EXPECT_EQ((*client)->worker_id(), "node-a/0");
  ASSERT_NE(FindMember(Status(), "node-a/0"), nullptr);

  (*client)->Report(/*step=*/12, /*loss=*/0.5, /*samples_per_second=*/100, /*finished=*/false,
                    /*test_accuracy=*/0.75);
  (*client)->ReportTotalSteps(40);
  // The background heartbeats bring them without a Flush.
  EXPECT_TRUE(WaitFor(
      [&] {
        const v1::CoordinatorStatus status = Status();
        const v1::MemberStatus* m = FindMember(status, "node-a/0");
        return m != nullptr && m->step() == 12 && m->test_accuracy() == 0.75;
      },
      absl::Seconds(10)));
  const v1::CoordinatorStatus status = Status();
  const v1::MemberStatus* m = FindMember(status, "node-a/0");
  ASSERT_NE(m, nullptr);
  EXPECT_DOUBLE_EQ(m->loss(), 0.5);
  EXPECT_DOUBLE_EQ(m->samples_per_second(), 100);
}

TEST_F(CoordinatorClientTest, WaitsForARunAndStopsWaitingWhenTold) {
  absl::StatusOr<std::unique_ptr<CoordinatorClient>> client =
      CoordinatorClient::Connect(ClientOptions());
  ASSERT_THAT(client, IsOk());
  int asked = 0;
  EXPECT_THAT((*client)->WaitForRun([&] { return ++asked > 2; }),
              StatusIs(absl::StatusCode::kCancelled, ""));
  StartRun();
  absl::StatusOr<v1::RunInfo> run = (*client)->WaitForRun([] { return false; });
  ASSERT_THAT(run, IsOk());
  EXPECT_EQ(run->state(), v1::RUN_STATE_RUNNING);
  EXPECT_EQ(run->run_id(), Status().run().run_id());
  EXPECT_EQ((*client)->run().run_id(), run->run_id());
}

TEST_F(CoordinatorClientTest, ClaimsItsNodesLeadAndReportsTheSavedModel) {
  // Local rank 1 of 2 does not lead its node, until it claims the lead (its rank 0 died).
  CoordinatorClient::Options options = ClientOptions();
  options.identity.set_local_rank(1);
  options.identity.set_local_world_size(2);
  absl::StatusOr<std::unique_ptr<CoordinatorClient>> client = CoordinatorClient::Connect(options);
  ASSERT_THAT(client, IsOk());
  EXPECT_FALSE(FindMember(Status(), "node-a/1")->node_leader());
  ASSERT_THAT((*client)->ClaimNodeLead("node-a/0", ""), IsOk());
  EXPECT_TRUE(FindMember(Status(), "node-a/1")->node_leader());

  StartRun();
  ASSERT_THAT((*client)->WaitForRun([] { return false; }), IsOk());
  (*client)->ReportModelPath("/models/final.pt");
  ASSERT_THAT((*client)->Flush(), IsOk());
  EXPECT_EQ(Status().run().model_path(), "/models/final.pt");
}

TEST_F(CoordinatorClientTest, RejoinsACoordinatorThatForgotIt) {
  absl::StatusOr<std::unique_ptr<CoordinatorClient>> client =
      CoordinatorClient::Connect(ClientOptions());
  ASSERT_THAT(client, IsOk());
  // A coordinator started again on the same port, without a state folder: it knows no one,
  // answers the next heartbeat NOT_FOUND, and the client joins again on its own.
  const std::string address = server_->grpc_address();
  server_->Shutdown(absl::ZeroDuration());
  server_.reset();
  StartServer(address);
  EXPECT_TRUE(
      WaitFor([&] { return FindMember(Status(), "node-a/0") != nullptr; }, absl::Seconds(20)));
}

TEST_F(CoordinatorClientTest, LeavesOnceAndIsGone) {
  absl::StatusOr<std::unique_ptr<CoordinatorClient>> client =
      CoordinatorClient::Connect(ClientOptions());
  ASSERT_THAT(client, IsOk());
  ASSERT_THAT((*client)->Leave("finished"), IsOk());
  EXPECT_EQ(FindMember(Status(), "node-a/0"), nullptr);
  EXPECT_THAT((*client)->Leave("finished"), IsOk());  // idempotent
}

TEST_F(CoordinatorClientTest, AWrongOrMissingTokenIsRefusedAtOnceWithAHint) {
  CoordinatorClient::Options options = ClientOptions();
  options.token = "wrong";
  const absl::Time start = absl::Now();
  EXPECT_THAT(CoordinatorClient::Connect(options),
              StatusIs(absl::StatusCode::kPermissionDenied, "the token differs"));
  options.token = "";
  EXPECT_THAT(CoordinatorClient::Connect(options),
              StatusIs(absl::StatusCode::kUnauthenticated, "--token_file"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));  // not retried
}

TEST_F(CoordinatorClientTest, GivesUpOnAnUnreachableCoordinatorAtItsTimeoutOrWhenStopped) {
  const std::string address = server_->grpc_address();
  server_->Shutdown(absl::ZeroDuration());
  CoordinatorClient::Options options = ClientOptions();
  options.address = address;
  options.connect_timeout = absl::Seconds(1);
  EXPECT_THAT(CoordinatorClient::Connect(options), StatusIs(absl::StatusCode::kUnavailable, ""));

  options.connect_timeout = absl::Minutes(5);
  int asked = 0;
  options.stop = [&] { return ++asked > 3; };
  const absl::Time start = absl::Now();
  EXPECT_THAT(CoordinatorClient::Connect(options), StatusIs(absl::StatusCode::kCancelled, ""));
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
}

// Answers Join and Heartbeat only; a heartbeat that is not the final one takes 500 ms, and what
// each heartbeat carried is kept in the order their handlers end (as a coordinator applies them).
class SlowHeartbeatCoordinator final : public v1::Coordinator::Service {
 public:
  grpc::Status Join(grpc::ServerContext*, const v1::JoinRequest*,
                    v1::JoinResponse* response) override {
    response->set_worker_id("node-a/0");
    response->set_heartbeat_interval_seconds(0.1);
    return grpc::Status::OK;
  }
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse*) override {
    if (!request->finished()) {
      ++slow_;
      absl::SleepFor(absl::Milliseconds(500));
    }
    MutexLock lock(&mu_);
    applied_.push_back(*request);
    return grpc::Status::OK;
  }
  int slow() const { return slow_.load(); }
  std::vector<v1::HeartbeatRequest> applied() const {
    MutexLock lock(&mu_);
    return applied_;
  }

 private:
  std::atomic<int> slow_{0};
  mutable Mutex mu_;
  std::vector<v1::HeartbeatRequest> applied_ ABSL_GUARDED_BY(mu_);
};

TEST(CoordinatorClientOrderTest, APeriodicHeartbeatDoesNotOvertakeTheFinalReport) {
  SlowHeartbeatCoordinator fake;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&fake);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);

  CoordinatorClient::Options options;
  options.address = absl::StrCat("127.0.0.1:", port);
  options.identity.set_node_name("node-a");
  options.identity.set_local_world_size(1);
  options.connect_timeout = absl::Seconds(10);
  absl::StatusOr<std::unique_ptr<CoordinatorClient>> client = CoordinatorClient::Connect(options);
  ASSERT_THAT(client, IsOk());
  (*client)->Report(/*step=*/7, /*loss=*/0.5, /*samples_per_second=*/10, /*finished=*/false, 0);
  // A periodic heartbeat is in the coordinator's hands (slow) when the final report is sent.
  ASSERT_TRUE(WaitFor([&] { return fake.slow() > 0; }, absl::Seconds(10)));
  (*client)->Report(/*step=*/8, /*loss=*/0.25, /*samples_per_second=*/10, /*finished=*/true,
                    /*test_accuracy=*/0.8);
  ASSERT_THAT((*client)->Flush(), IsOk());
  (*client)->Leave("finished").IgnoreError();
  server->Shutdown();

  const std::vector<v1::HeartbeatRequest> applied = fake.applied();
  ASSERT_FALSE(applied.empty());
  EXPECT_TRUE(applied.back().finished());
  EXPECT_EQ(applied.back().step(), 8);
  EXPECT_DOUBLE_EQ(applied.back().test_accuracy(), 0.8);
}

}  // namespace
}  // namespace localsgd
