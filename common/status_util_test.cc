#include "common/status_util.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace localsgd {
namespace {

TEST(StatusUtilTest, OkMapsToOk) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
}

TEST(StatusUtilTest, EveryCodeAndMessageRoundTrips) {
  for (int code = 1; code <= 16; ++code) {
    absl::Status status(static_cast<absl::StatusCode>(code), "field x: bad");
    grpc::Status grpc_status = ToGrpcStatus(status);
    EXPECT_EQ(static_cast<int>(grpc_status.error_code()), code);
    EXPECT_EQ(grpc_status.error_message(), "field x: bad");
    EXPECT_EQ(FromGrpcStatus(grpc_status), status);
  }
}

TEST(StatusUtilTest, NamedCodesAgree) {
  EXPECT_EQ(ToGrpcStatus(absl::InvalidArgumentError("")).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ToGrpcStatus(absl::UnauthenticatedError("")).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(ToGrpcStatus(absl::FailedPreconditionError("")).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

// Issue 12, finding 7: a 9,000-byte id echoed in an error made the status exceed gRPC's
// metadata limit (the client saw RESOURCE_EXHAUSTED instead of the real code).
TEST(StatusUtilTest, EchoedIdsAndLongMessagesAreCut) {
  EXPECT_EQ(Quoted("node-1/0"), "\"node-1/0\"");
  EXPECT_EQ(Quoted("a\nb"), "\"a\\nb\"");
  const std::string id(9000, 'x');
  const std::string quoted = Quoted(id);
  EXPECT_LT(quoted.size(), 200u);
  EXPECT_NE(quoted.find("(9000 bytes)"), std::string::npos);
  grpc::Status status = ToGrpcStatus(absl::NotFoundError(std::string(5000, 'm')));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_LT(status.error_message().size(), 1100u);
  EXPECT_NE(status.error_message().find("(5000 bytes)"), std::string::npos);
}

}  // namespace
}  // namespace localsgd

namespace localsgd {
namespace {

TEST(StatusUtilTest, ConnectionHintsSayWhatToCheck) {
  EXPECT_THAT(ConnectionHint(absl::UnavailableError("failed to connect")),
              ::testing::HasSubstr("check --coordinator"));
  EXPECT_THAT(ConnectionHint(absl::UnauthenticatedError("missing bearer token")),
              ::testing::HasSubstr("--token_file"));
  EXPECT_THAT(ConnectionHint(absl::PermissionDeniedError("wrong token")),
              ::testing::HasSubstr("token differs"));
  EXPECT_EQ(ConnectionHint(absl::InvalidArgumentError("spec")), "");
  // The token was right: the refusal names what was not.
  EXPECT_EQ(ConnectionHint(absl::PermissionDeniedError(
                "join 127.0.0.1:1: node_key: not the key of node \"a\"")),
            "");
}

}  // namespace
}  // namespace localsgd
