// Every Coordinator RPC through a real server on 127.0.0.1:0, with each error code, the auth
// rules, status streaming, health checking and the HTTP endpoints over a real socket.
#include "coordinator/coordinator_server.h"

#include <google/protobuf/text_format.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>
#include <httplib.h>

#include <memory>
#include <string>

#include "absl/synchronization/notification.h"
#include "common/auth.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/localsgd/v1/coordinator.grpc.pb.h"

namespace localsgd {
namespace {

using ::testing::HasSubstr;

constexpr char kToken[] = "test-token";

class CoordinatorServerTest : public ::testing::Test {
 protected:
  void SetUp() override { StartServer(kToken); }

  void StartServer(const std::string& token) {
    CoordinatorServer::Options options;
    options.grpc_address = "127.0.0.1:0";
    options.http_address = "127.0.0.1:0";
    options.token = token;
    options.lease_timeout = absl::Seconds(30);
    options.heartbeat_interval = absl::Seconds(1);
    auto server = CoordinatorServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    channel_ = grpc::CreateChannel(server_->grpc_address(), grpc::InsecureChannelCredentials());
    stub_ = v1::Coordinator::NewStub(channel_);
  }

  // A context with a deadline and, unless `token` is null, a bearer token.
  std::unique_ptr<grpc::ClientContext> Ctx(const char* token = kToken) {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (token != nullptr) AddBearerToken(context.get(), token);
    return context;
  }

  grpc::Status Join(const std::string& node, int rank, int world, v1::JoinResponse* response,
                    const char* token = kToken) {
    v1::JoinRequest request;
    request.mutable_identity()->set_node_name(node);
    request.mutable_identity()->set_local_rank(rank);
    request.mutable_identity()->set_local_world_size(world);
    request.set_hostname("localhost");
    request.set_pid(42);
    return stub_->Join(Ctx(token).get(), request, response);
  }

  grpc::Status StartRun(const std::string& spec_text, v1::StartRunResponse* response,
                        const char* token = kToken) {
    v1::StartRunRequest request;
    if (!google::protobuf::TextFormat::ParseFromString(spec_text, request.mutable_spec())) {
      ADD_FAILURE() << "bad spec text in test: " << spec_text;
    }
    return stub_->StartRun(Ctx(token).get(), request, response);
  }

  v1::CoordinatorStatus Status() {
    v1::CoordinatorStatus status;
    EXPECT_TRUE(stub_->GetStatus(Ctx(nullptr).get(), v1::GetStatusRequest(), &status).ok());
    return status;
  }

  httplib::Client Http() {
    size_t colon = server_->http_address().rfind(':');
    return httplib::Client(server_->http_address().substr(0, colon),
                           std::stoi(server_->http_address().substr(colon + 1)));
  }

  std::unique_ptr<CoordinatorServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

TEST_F(CoordinatorServerTest, ListensOnRealPorts) {
  EXPECT_THAT(server_->grpc_address(), ::testing::StartsWith("127.0.0.1:"));
  EXPECT_NE(server_->grpc_address(), "127.0.0.1:0");
  EXPECT_NE(server_->http_address(), "127.0.0.1:0");
}

TEST_F(CoordinatorServerTest, JoinHeartbeatLeave) {
  v1::JoinResponse joined;
  ASSERT_TRUE(Join("node-a", 0, 2, &joined).ok());
  EXPECT_EQ(joined.worker_id(), "node-a/0");
  EXPECT_EQ(joined.generation(), 1);
  EXPECT_DOUBLE_EQ(joined.lease_timeout_seconds(), 30);
  EXPECT_EQ(joined.run().state(), v1::RUN_STATE_IDLE);

  v1::JoinResponse again;
  ASSERT_TRUE(Join("node-a", 0, 2, &again).ok());
  EXPECT_EQ(again.worker_id(), "node-a/0");
  EXPECT_EQ(again.generation(), 2);

  v1::HeartbeatRequest beat;
  beat.set_worker_id("node-a/0");
  beat.set_step(5);
  beat.set_loss(1.25);
  beat.set_samples_per_second(300);
  v1::HeartbeatResponse beat_response;
  // Only the latest generation's credential speaks for the member.
  beat.set_member_credential(joined.member_credential());
  EXPECT_EQ(stub_->Heartbeat(Ctx().get(), beat, &beat_response).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  beat.set_member_credential(again.member_credential());
  ASSERT_TRUE(stub_->Heartbeat(Ctx().get(), beat, &beat_response).ok());
  v1::CoordinatorStatus status = Status();
  ASSERT_EQ(status.members_size(), 1);
  EXPECT_EQ(status.members(0).step(), 5);
  EXPECT_DOUBLE_EQ(status.members(0).loss(), 1.25);

  v1::LeaveRequest leave;
  leave.set_worker_id("node-a/0");
  leave.set_reason("finished");
  leave.set_member_credential(again.member_credential());
  v1::LeaveResponse left;
  ASSERT_TRUE(stub_->Leave(Ctx().get(), leave, &left).ok());
  EXPECT_EQ(Status().members_size(), 0);
}

TEST_F(CoordinatorServerTest, ErrorCodes) {
  v1::JoinResponse joined;
  grpc::Status bad_join = Join("", 0, 1, &joined);
  EXPECT_EQ(bad_join.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bad_join.error_message(), HasSubstr("identity.node_name"));

  v1::HeartbeatRequest ghost;
  ghost.set_worker_id("ghost/0");
  v1::HeartbeatResponse beat_response;
  grpc::Status unknown = stub_->Heartbeat(Ctx().get(), ghost, &beat_response);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(unknown.error_message(), HasSubstr("ghost/0"));
  // Issue 12, finding 7: a 9,000-byte id is echoed cut short, so the answer still fits gRPC's
  // metadata (it used to arrive as RESOURCE_EXHAUSTED).
  ghost.set_worker_id(std::string(9000, 'g'));
  grpc::Status long_id = stub_->Heartbeat(Ctx().get(), ghost, &beat_response);
  EXPECT_EQ(long_id.error_code(), grpc::StatusCode::NOT_FOUND) << long_id.error_message();
  EXPECT_THAT(long_id.error_message(), HasSubstr("(9000 bytes)"));
  ghost.set_worker_id("ghost/0");

  v1::LeaveRequest leave;
  leave.set_worker_id("ghost/0");
  v1::LeaveResponse left;
  EXPECT_EQ(stub_->Leave(Ctx().get(), leave, &left).error_code(), grpc::StatusCode::NOT_FOUND);

  v1::StartRunResponse started;
  grpc::Status bad_spec = StartRun("model { builtin: \"mlp\" } local_sgd_steps: 0", &started);
  EXPECT_EQ(bad_spec.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bad_spec.error_message(), HasSubstr("spec.local_sgd_steps"));
  for (const char* spec :
       {"local_sgd_steps: 4", "model { builtin: \"mlp\" } optimizer { lr: -1 }",
        "model { builtin: \"mlp\" } codec: 17", "model { builtin: \"mlp\" } min_workers: 0"}) {
    EXPECT_EQ(StartRun(spec, &started).error_code(), grpc::StatusCode::INVALID_ARGUMENT) << spec;
  }
  EXPECT_EQ(stub_->StartRun(Ctx().get(), v1::StartRunRequest(), &started).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  v1::StopRunResponse stopped;
  EXPECT_EQ(stub_->StopRun(Ctx().get(), v1::StopRunRequest(), &stopped).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);

  ASSERT_TRUE(StartRun("model { builtin: \"mlp\" } min_workers: 2", &started).ok());
  grpc::Status second = StartRun("model { builtin: \"cnn\" }", &started);
  EXPECT_EQ(second.error_code(), grpc::StatusCode::FAILED_PRECONDITION);

  v1::StopRunRequest wrong_run;
  wrong_run.set_run_id("run-unknown");
  EXPECT_EQ(stub_->StopRun(Ctx().get(), wrong_run, &stopped).error_code(),
            grpc::StatusCode::NOT_FOUND);

  // None of the bad requests changed anything.
  v1::CoordinatorStatus status = Status();
  EXPECT_EQ(status.members_size(), 0);
  EXPECT_EQ(status.run().state(), v1::RUN_STATE_WAITING_FOR_WORKERS);
  EXPECT_EQ(status.run().spec().model().builtin(), "mlp");
}

TEST_F(CoordinatorServerTest, RunLifecycleThroughTheApi) {
  v1::StartRunResponse started;
  ASSERT_TRUE(
      StartRun("model { builtin: \"mlp\" } min_workers: 2 local_sgd_steps: 4", &started).ok());
  EXPECT_EQ(started.run().state(), v1::RUN_STATE_WAITING_FOR_WORKERS);
  EXPECT_EQ(started.run().spec().local_sgd_steps(), 4);
  v1::JoinResponse joined;
  ASSERT_TRUE(Join("a", 0, 1, &joined).ok());
  EXPECT_EQ(joined.run().state(), v1::RUN_STATE_WAITING_FOR_WORKERS);
  ASSERT_TRUE(Join("b", 0, 1, &joined).ok());
  EXPECT_EQ(joined.run().state(), v1::RUN_STATE_RUNNING);
  EXPECT_EQ(joined.run().run_id(), started.run().run_id());

  v1::StopRunRequest stop;
  stop.set_run_id(started.run().run_id());
  stop.set_reason("enough");
  v1::StopRunResponse stopped;
  ASSERT_TRUE(stub_->StopRun(Ctx().get(), stop, &stopped).ok());
  EXPECT_EQ(stopped.run().state(), v1::RUN_STATE_STOPPED);
  EXPECT_EQ(stopped.run().reason(), "enough");
  EXPECT_EQ(stub_->StopRun(Ctx().get(), stop, &stopped).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  // A new run may start after the old one ended.
  ASSERT_TRUE(StartRun("model { builtin: \"cnn\" }", &started).ok());
  EXPECT_EQ(started.run().state(), v1::RUN_STATE_RUNNING);
}

TEST_F(CoordinatorServerTest, AuthRules) {
  v1::JoinResponse joined;
  EXPECT_EQ(Join("a", 0, 1, &joined, nullptr).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Join("a", 0, 1, &joined, "wrong").error_code(), grpc::StatusCode::PERMISSION_DENIED);
  v1::StartRunResponse started;
  EXPECT_EQ(StartRun("model { builtin: \"mlp\" }", &started, nullptr).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(StartRun("model { builtin: \"mlp\" }", &started, "wrong").error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  v1::StopRunResponse stopped;
  EXPECT_EQ(stub_->StopRun(Ctx(nullptr).get(), v1::StopRunRequest(), &stopped).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(stub_->StopRun(Ctx("wrong").get(), v1::StopRunRequest(), &stopped).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  v1::HeartbeatRequest beat;
  beat.set_worker_id("a/0");
  v1::HeartbeatResponse beat_response;
  EXPECT_EQ(stub_->Heartbeat(Ctx(nullptr).get(), beat, &beat_response).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  v1::LeaveRequest leave;
  leave.set_worker_id("a/0");
  v1::LeaveResponse left;
  EXPECT_EQ(stub_->Leave(Ctx("wrong").get(), leave, &left).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // Reads are open.
  v1::CoordinatorStatus status;
  EXPECT_TRUE(stub_->GetStatus(Ctx(nullptr).get(), v1::GetStatusRequest(), &status).ok());
  EXPECT_EQ(status.run().state(), v1::RUN_STATE_IDLE);
  EXPECT_EQ(status.members_size(), 0);
  EXPECT_EQ(status.transport_security(), "plaintext");
  EXPECT_TRUE(status.token_required());
  // With the right token everything works.
  EXPECT_TRUE(Join("a", 0, 1, &joined).ok());
}

TEST_F(CoordinatorServerTest, NoTokenConfiguredMeansNoAuth) {
  server_->Shutdown();
  StartServer("");
  v1::JoinResponse joined;
  EXPECT_TRUE(Join("a", 0, 1, &joined, nullptr).ok());
  v1::StartRunResponse started;
  EXPECT_TRUE(StartRun("model { builtin: \"mlp\" }", &started, nullptr).ok());
  v1::CoordinatorStatus status;
  ASSERT_TRUE(stub_->GetStatus(Ctx(nullptr).get(), v1::GetStatusRequest(), &status).ok());
  EXPECT_FALSE(status.token_required());
}

TEST_F(CoordinatorServerTest, WatchStatusStreamsChanges) {
  auto context = Ctx(nullptr);
  v1::WatchStatusRequest request;
  request.set_min_interval_seconds(0.01);
  auto reader = stub_->WatchStatus(context.get(), request);
  v1::CoordinatorStatus first;
  ASSERT_TRUE(reader->Read(&first));
  EXPECT_EQ(first.members_size(), 0);
  v1::JoinResponse joined;
  ASSERT_TRUE(Join("a", 0, 1, &joined).ok());
  v1::CoordinatorStatus next;
  // Read until the join shows up; every snapshot is newer than the one before.
  int64_t last_version = first.version();
  do {
    ASSERT_TRUE(reader->Read(&next));
    EXPECT_GT(next.version(), last_version);
    last_version = next.version();
  } while (next.members_size() == 0);
  EXPECT_EQ(next.members(0).worker_id(), "a/0");
  context->TryCancel();
  while (reader->Read(&next)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

TEST_F(CoordinatorServerTest, WatchStatusRejectsBadIntervalAndEndsOnShutdown) {
  {
    auto context = Ctx(nullptr);
    v1::WatchStatusRequest bad;
    bad.set_min_interval_seconds(-1);
    auto reader = stub_->WatchStatus(context.get(), bad);
    v1::CoordinatorStatus status;
    EXPECT_FALSE(reader->Read(&status));
    grpc::Status finished = reader->Finish();
    EXPECT_EQ(finished.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(finished.error_message(), HasSubstr("min_interval_seconds"));
  }
  auto context = Ctx(nullptr);
  auto reader = stub_->WatchStatus(context.get(), v1::WatchStatusRequest());
  v1::CoordinatorStatus status;
  ASSERT_TRUE(reader->Read(&status));
  server_->Shutdown();
  while (reader->Read(&status)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(CoordinatorServerTest, HttpEndpoints) {
  v1::JoinResponse joined;
  ASSERT_TRUE(Join("node-a", 0, 1, &joined).ok());
  v1::StartRunResponse started;
  ASSERT_TRUE(StartRun("model { builtin: \"mlp\" } name: \"demo\"", &started).ok());
  httplib::Client http = Http();

  auto status = http.Get("/status");
  ASSERT_TRUE(status);
  EXPECT_EQ(status->status, 200);
  EXPECT_EQ(status->get_header_value("Content-Type"), "application/json");
  EXPECT_THAT(status->body, HasSubstr("\"state\": \"RUN_STATE_RUNNING\""));
  EXPECT_THAT(status->body, HasSubstr("\"worker_id\": \"node-a/0\""));
  EXPECT_THAT(status->body, HasSubstr("\"heartbeat_age_seconds\""));
  EXPECT_THAT(status->body, HasSubstr("\"local_sgd_steps\": 8"));

  auto metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_THAT(metrics->get_header_value("Content-Type"), HasSubstr("version=0.0.4"));
  EXPECT_THAT(metrics->body, HasSubstr("localsgd_members 1"));
  EXPECT_THAT(metrics->body, HasSubstr("localsgd_run_state{state=\"RUNNING\"} 1"));
  EXPECT_THAT(metrics->body, HasSubstr("localsgd_joins_total 1"));

  auto health = http.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, "ok\n");

  auto page = http.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_THAT(page->body, HasSubstr("<title>localsgd coordinator</title>"));

  auto post = http.Post("/status", "{}", "application/json");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);
  auto missing = http.Get("/nope");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
}

TEST_F(CoordinatorServerTest, MalformedBytesDoNotCrashTheServer) {
  // A request body that is not a JoinRequest at all.
  grpc::GenericStub generic(channel_);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  std::string junk = "\xff\xff\xff\xff\x0f garbage";
  grpc::Slice slice(junk);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  absl::Notification done;
  grpc::Status result;
  generic.UnaryCall(&context, "/localsgd.v1.Coordinator/Join", grpc::StubOptions(), &request,
                    &response, [&](grpc::Status s) {
                      result = s;
                      done.Notify();
                    });
  done.WaitForNotification();
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(Status().members_size(), 0);
  v1::JoinResponse joined;
  EXPECT_TRUE(Join("a", 0, 1, &joined).ok());
}

TEST(CoordinatorServerStartTest, BadAddressesNameTheFlag) {
  CoordinatorServer::Options options;
  options.grpc_address = "nonsense";
  EXPECT_THAT(CoordinatorServer::Start(options).status().message(), HasSubstr("--grpc_address"));
  options.grpc_address = "127.0.0.1:0";
  options.http_address = "127.0.0.1:99999";
  EXPECT_THAT(CoordinatorServer::Start(options).status().message(), HasSubstr("--http_address"));
}

TEST(CoordinatorServerStartTest, TakenPortIsRefused) {
  CoordinatorServer::Options options;
  options.grpc_address = "127.0.0.1:0";
  options.http_address = "127.0.0.1:0";
  auto first = CoordinatorServer::Start(options);
  ASSERT_TRUE(first.ok()) << first.status();
  options.grpc_address = (*first)->grpc_address();
  auto second = CoordinatorServer::Start(options);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr("--grpc_address"));
  // Issue 37, finding 12: said in one line, and why.
  EXPECT_THAT(second.status().message(), HasSubstr("the address is already in use"));
}

}  // namespace
}  // namespace localsgd
