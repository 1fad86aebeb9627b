#include "common/tls.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/localsgd/v1/coordinator.grpc.pb.h"
#include "tests/testutil/status_matchers.h"

namespace localsgd {
namespace {

using ::localsgd::testing::IsOk;
using ::localsgd::testing::StatusIs;

// Certificates made once by tests/testutil/make_certs.sh.
class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(absl::StrCat(std::getenv("TEST_TMPDIR"), "/certs"));
    const std::string script =
        absl::StrCat(std::getenv("TEST_SRCDIR"), "/", std::getenv("TEST_WORKSPACE"),
                     "/tests/testutil/make_certs.sh");
    ASSERT_EQ(std::system(absl::StrCat("bash ", script, " ", *dir_).c_str()), 0);
  }
  static std::string F(const std::string& name) { return absl::StrCat(*dir_, "/", name); }

  // A gRPC server on a free port whose methods are all unimplemented: a call that gets
  // through the handshake is UNIMPLEMENTED, one refused by TLS is UNAVAILABLE.
  void Serve(const ServerTls& tls) {
    auto credentials = MakeServerCredentials(tls);
    ASSERT_THAT(credentials, IsOk());
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", *credentials, &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    address_ = absl::StrCat("127.0.0.1:", port);
  }
  grpc::StatusCode Call(const ClientTls& tls) {
    auto credentials = MakeChannelCredentials(tls);
    EXPECT_THAT(credentials, IsOk());
    auto stub = v1::Coordinator::NewStub(grpc::CreateChannel(address_, *credentials));
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    v1::CoordinatorStatus status;
    return stub->GetStatus(&context, v1::GetStatusRequest(), &status).error_code();
  }

  static std::string* dir_;
  v1::Coordinator::Service service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};
std::string* TlsTest::dir_ = nullptr;

TEST_F(TlsTest, ServerTlsIsVerifiedAndPlaintextIsRefused) {
  Serve({F("server.pem"), F("server.key"), ""});
  EXPECT_EQ(Call({F("ca.pem"), "", ""}), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(Call({}), grpc::StatusCode::UNAVAILABLE);                           // plaintext
  EXPECT_EQ(Call({F("rogue-ca.pem"), "", ""}), grpc::StatusCode::UNAVAILABLE);  // unverified
}

TEST_F(TlsTest, MutualTlsRequiresAClientCertificateFromTheCa) {
  Serve({F("server.pem"), F("server.key"), F("ca.pem")});
  EXPECT_EQ(Call({F("ca.pem"), F("client.pem"), F("client.key")}), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(Call({F("ca.pem"), "", ""}), grpc::StatusCode::UNAVAILABLE);  // no certificate
  EXPECT_EQ(Call({F("ca.pem"), F("rogue-client.pem"), F("rogue-client.key")}),
            grpc::StatusCode::UNAVAILABLE);  // another CA's
  EXPECT_EQ(Call({}), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(TlsTest, BadFilesAndFlagCombinationsNameTheFlag) {
  EXPECT_THAT(MakeServerCredentials({F("missing.pem"), F("server.key"), ""}),
              StatusIs(absl::StatusCode::kNotFound, "--tls_cert"));
  EXPECT_THAT(MakeServerCredentials({F("server.pem"), "", ""}),
              StatusIs(absl::StatusCode::kInvalidArgument, "--tls_key: required with --tls_cert"));
  EXPECT_THAT(MakeServerCredentials({"", "", F("ca.pem")}),
              StatusIs(absl::StatusCode::kInvalidArgument, "--tls_client_ca"));
  EXPECT_THAT(MakeServerCredentials({F("server.pem"), F("server.key"), F("server.ext")}),
              StatusIs(absl::StatusCode::kInvalidArgument, "--tls_client_ca: "));
  EXPECT_THAT(MakeChannelCredentials({F("server.ext"), "", ""}),
              StatusIs(absl::StatusCode::kInvalidArgument, "not a PEM file"));
  EXPECT_THAT(MakeChannelCredentials({"", F("client.pem"), F("client.key")}),
              StatusIs(absl::StatusCode::kInvalidArgument, "--tls_cert: needs --tls_ca"));
  EXPECT_THAT(MakeChannelCredentials({F("ca.pem"), "", F("client.key")}),
              StatusIs(absl::StatusCode::kInvalidArgument, "--tls_cert: required with --tls_key"));
  EXPECT_THAT(MakeChannelCredentials({F("ca.pem"), F("client.pem"), F("nope.key")}),
              StatusIs(absl::StatusCode::kNotFound, "--tls_key"));
}

}  // namespace
}  // namespace localsgd
