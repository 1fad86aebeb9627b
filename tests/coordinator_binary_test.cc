// The coordinator binary as operators and stock gRPC clients meet it: real process, real
// ports, health checking, server reflection, SIGTERM, usage errors.
#include <google/protobuf/descriptor.pb.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <signal.h>

#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/localsgd/v1/coordinator.grpc.pb.h"
#include "tests/protos/grpc_health.grpc.pb.h"
#include "tests/protos/grpc_reflection.grpc.pb.h"
#include "tests/testutil/subprocess.h"

namespace localsgd {
namespace {

using ::localsgd::testing::RunfilePath;
using ::localsgd::testing::Subprocess;
using ::testing::HasSubstr;

std::unique_ptr<grpc::ClientContext> Ctx() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return context;
}

class CoordinatorBinaryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto process = Subprocess::Start({RunfilePath("coordinator/coordinator"),
                                      "--grpc_address=127.0.0.1:0", "--http_address=127.0.0.1:0"});
    ASSERT_TRUE(process.ok()) << process.status();
    process_ = std::move(*process);
    auto grpc_address = process_->WaitForLine("grpc listening on ", absl::Seconds(30));
    ASSERT_TRUE(grpc_address.ok()) << grpc_address.status();
    auto http_address = process_->WaitForLine("http listening on ", absl::Seconds(30));
    ASSERT_TRUE(http_address.ok()) << http_address.status();
    EXPECT_THAT(*grpc_address, ::testing::StartsWith("127.0.0.1:"));
    EXPECT_NE(*grpc_address, "127.0.0.1:0");
    channel_ = grpc::CreateChannel(*grpc_address, grpc::InsecureChannelCredentials());
  }

  std::unique_ptr<Subprocess> process_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(CoordinatorBinaryTest, HealthCheckingAnswers) {
  auto health = grpc::health::v1::Health::NewStub(channel_);
  for (const char* service : {"", "localsgd.v1.Coordinator"}) {
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    grpc::health::v1::HealthCheckResponse response;
    grpc::Status status = health->Check(Ctx().get(), request, &response);
    ASSERT_TRUE(status.ok()) << service << ": " << status.error_message();
    EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING) << service;
  }
  grpc::health::v1::HealthCheckRequest unknown;
  unknown.set_service("no.such.Service");
  grpc::health::v1::HealthCheckResponse response;
  EXPECT_EQ(health->Check(Ctx().get(), unknown, &response).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(CoordinatorBinaryTest, ReflectionListsAndDescribesTheService) {
  using grpc::reflection::v1alpha::ServerReflection;
  using grpc::reflection::v1alpha::ServerReflectionRequest;
  using grpc::reflection::v1alpha::ServerReflectionResponse;
  auto reflection = ServerReflection::NewStub(channel_);
  auto context = Ctx();
  auto stream = reflection->ServerReflectionInfo(context.get());

  ServerReflectionRequest list;
  list.set_list_services("*");
  ASSERT_TRUE(stream->Write(list));
  ServerReflectionResponse listed;
  ASSERT_TRUE(stream->Read(&listed));
  std::set<std::string> services;
  for (const auto& service : listed.list_services_response().service()) {
    services.insert(service.name());
  }
  EXPECT_TRUE(services.count("localsgd.v1.Coordinator")) << listed.DebugString();
  EXPECT_TRUE(services.count("grpc.health.v1.Health")) << listed.DebugString();

  ServerReflectionRequest describe;
  describe.set_file_containing_symbol("localsgd.v1.Coordinator");
  ASSERT_TRUE(stream->Write(describe));
  ServerReflectionResponse described;
  ASSERT_TRUE(stream->Read(&described));
  std::set<std::string> files;
  bool found_start_run = false;
  for (const std::string& bytes : described.file_descriptor_response().file_descriptor_proto()) {
    google::protobuf::FileDescriptorProto file;
    ASSERT_TRUE(file.ParseFromString(bytes));
    files.insert(file.name());
    for (const auto& service : file.service()) {
      for (const auto& method : service.method()) {
        if (method.name() == "StartRun") found_start_run = true;
      }
    }
  }
  EXPECT_TRUE(files.count("proto/localsgd/v1/coordinator.proto"));
  EXPECT_TRUE(found_start_run);
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(CoordinatorBinaryTest, SigtermShutsDownCleanly) {
  auto stub = v1::Coordinator::NewStub(channel_);
  v1::CoordinatorStatus status;
  ASSERT_TRUE(stub->GetStatus(Ctx().get(), v1::GetStatusRequest(), &status).ok());
  process_->Signal(SIGTERM);
  EXPECT_EQ(process_->Wait(absl::Seconds(30)), 0) << process_->output();
  // Gone: nothing answers on its port any more.
  EXPECT_FALSE(stub->GetStatus(Ctx().get(), v1::GetStatusRequest(), &status).ok());
}

TEST(CoordinatorUsageTest, BadFlagsExitNonZeroWithOneClearLine) {
  struct Case {
    std::vector<std::string> flags;
    const char* message;
  };
  for (const Case& c : std::vector<Case>{
           {{"--grpc_address=nonsense"}, "--grpc_address"},
           {{"--grpc_address=127.0.0.1:0", "--http_address=127.0.0.1:70000"}, "--http_address"},
           {{"--no_such_flag"}, "no_such_flag"},
           {{"--token=a", "--token_file=/tmp/x"}, "--token"},
           {{"--token_file=/nonexistent/token"}, "/nonexistent/token"},
           {{"--grpc_address=127.0.0.1:0", "--lease_timeout=1s", "--heartbeat_interval=2s"},
            "--heartbeat_interval"},
           {{"positional"}, "unexpected argument"},
       }) {
    std::vector<std::string> argv = {RunfilePath("coordinator/coordinator")};
    argv.insert(argv.end(), c.flags.begin(), c.flags.end());
    auto process = Subprocess::Start(argv);
    ASSERT_TRUE(process.ok());
    EXPECT_NE((*process)->Wait(absl::Seconds(30)), 0) << c.message;
    EXPECT_THAT((*process)->output(), HasSubstr(c.message));
  }
}

TEST(CoordinatorUsageTest, HelpListsTheFlags) {
  auto process = Subprocess::Start({RunfilePath("coordinator/coordinator"), "--help"});
  ASSERT_TRUE(process.ok());
  (*process)->Wait(absl::Seconds(30));
  for (const char* flag : {"--grpc_address", "--http_address", "--token", "--token_file",
                           "--state_dir", "--lease_timeout"}) {
    EXPECT_THAT((*process)->output(), HasSubstr(flag));
  }
}

}  // namespace
}  // namespace localsgd
