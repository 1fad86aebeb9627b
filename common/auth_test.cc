#include "common/auth.h"

#include <cstdlib>

#include "absl/time/clock.h"
#include "common/file_util.h"
#include "gtest/gtest.h"

namespace localsgd {
namespace {

using Metadata = std::multimap<grpc::string_ref, grpc::string_ref>;

TEST(AuthTest, NoExpectedTokenLetsEverythingThrough) {
  EXPECT_TRUE(CheckBearerToken(Metadata{}, "").ok());
}

TEST(AuthTest, MissingMalformedWrongAndRightTokens) {
  EXPECT_EQ(CheckBearerToken(Metadata{}, "s3cret").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(CheckBearerToken(Metadata{{"authorization", "s3cret"}}, "s3cret").code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(CheckBearerToken(Metadata{{"authorization", "Bearer nope"}}, "s3cret").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(CheckBearerToken(Metadata{{"authorization", "Bearer "}}, "s3cret").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(CheckBearerToken(Metadata{{"authorization", "Bearer s3cret2"}}, "s3cret").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(CheckBearerToken(Metadata{{"authorization", "Bearer s3cre"}}, "s3cret").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(CheckBearerToken(Metadata{{"authorization", "Bearer s3cret"}}, "s3cret").ok());
}

TEST(AuthTest, AuthorizedContextEndsAfterTheTimeout) {
  const absl::Time before = absl::Now();
  std::unique_ptr<grpc::ClientContext> context = AuthorizedContext("s3cret", absl::Seconds(30));
  const absl::Time deadline = absl::FromChrono(context->deadline());
  EXPECT_GE(deadline, before + absl::Seconds(30));
  EXPECT_LE(deadline, absl::Now() + absl::Seconds(30));
}

TEST(AuthTest, ResolveTokenFromFlagOrFile) {
  EXPECT_EQ(*ResolveToken("abc", ""), "abc");
  EXPECT_EQ(*ResolveToken("", ""), "");
  std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/token";
  ASSERT_TRUE(WriteFileAtomically(path, "  from-file\n").ok());
  EXPECT_EQ(*ResolveToken("", path), "from-file");
  EXPECT_EQ(ResolveToken("abc", path).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ResolveToken("", path + ".missing").status().code(), absl::StatusCode::kNotFound);
  // Issue 50, finding 8: a device is refused at once, naming the flag.
  absl::StatusOr<std::string> zero = ResolveToken("", "/dev/zero");
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(zero.status().message().find("--token_file: /dev/zero is not a regular file"),
            std::string::npos)
      << zero.status();
  ASSERT_TRUE(WriteFileAtomically(path, " \n").ok());
  EXPECT_EQ(ResolveToken("", path).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace localsgd
