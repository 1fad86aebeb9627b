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

TEST(AddressTest, LoopbackHosts) {
  for (const char* host : {"localhost", "127.0.0.1", "127.1.2.3", "::1"}) {
    EXPECT_TRUE(IsLoopbackHost(host)) << host;
  }
  for (const char* host : {"", "0.0.0.0", "::", "10.0.0.1", "node-1", "128.0.0.1", "::2"}) {
    EXPECT_FALSE(IsLoopbackHost(host)) << host;
  }
}

TEST(AddressTest, RejectsMalformedWithTheFlagName) {
  for (const char* bad : {"", "localhost", ":80", "host:", "host:65536", "host:-1", "host:12ab",
                          "::1:80", "[::1:80", "a b:80", "[]:80"}) {
    auto r = ParseHostPort(bad, "--grpc_address");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("--grpc_address"), std::string::npos);
  }
}

TEST(AddressTest, AdvertisedAddressTakesThePeersHostForAWildcard) {
  EXPECT_EQ(*ResolveAdvertisedAddress("0.0.0.0:7000", "ipv4:10.1.2.3:5555", "f"), "10.1.2.3:7000");
  EXPECT_EQ(*ResolveAdvertisedAddress(":7000", "ipv4:10.1.2.3:5555", "f"), "10.1.2.3:7000");
  EXPECT_EQ(*ResolveAdvertisedAddress("[::]:7000", "ipv6:[::1]:5555", "f"), "[::1]:7000");
  EXPECT_EQ(*ResolveAdvertisedAddress("node-3:7000", "ipv4:10.1.2.3:5555", "f"), "node-3:7000");
  EXPECT_EQ(*ResolveAdvertisedAddress("", "ipv4:10.1.2.3:5555", "f"), "");
  for (const char* bad : {"node-3", "node-3:0", "a b:1", "[::1:5"}) {
    absl::StatusOr<std::string> resolved = ResolveAdvertisedAddress(bad, "ipv4:1.2.3.4:5", "f");
    EXPECT_EQ(resolved.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(resolved.status().message().find("f: "), 0u) << resolved.status();
  }
  EXPECT_FALSE(ResolveAdvertisedAddress(":7000", "unix:/tmp/s", "f").ok());
  EXPECT_FALSE(ResolveAdvertisedAddress(std::string(400, 'a') + ":1", "ipv4:1.2.3.4:5", "f").ok());
}

}  // namespace
}  // namespace localsgd
