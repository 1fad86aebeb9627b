#include "common/status_util.h"

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

}  // namespace
}  // namespace localsgd
