#include "common/address.h"

#include "gtest/gtest.h"

namespace localsgd {
namespace {

TEST(AddressTest, ParsesHostsAndPorts) {
  auto a = ParseHostPort("127.0.0.1:0", "--grpc_address");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 0);
  auto b = ParseHostPort("[::1]:8080", "--http_address");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->host, "::1");
  EXPECT_EQ(b->port, 8080);
  EXPECT_EQ(b->ToString(), "[::1]:8080");
  auto c = ParseHostPort("node-1.cluster:50051", "x");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->ToString(), "node-1.cluster:50051");
}

TEST(AddressTest, RejectsMalformedWithTheFlagName) {
  for (const char* bad : {"", "localhost", ":80", "host:", "host:65536", "host:-1",
                          "host:12ab", "::1:80", "[::1:80", "a b:80", "[]:80"}) {
    auto r = ParseHostPort(bad, "--grpc_address");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("--grpc_address"), std::string::npos);
  }
}

}  // namespace
}  // namespace localsgd
