#include "common/node_key.h"

#include "gtest/gtest.h"

namespace localsgd {
namespace {

TEST(NodeKeyTest, AKeyIsItsNodesUnderItsSecretOnly) {
  const std::string key = NodeKey("secret", "node-0");
  EXPECT_EQ(key.size(), 64u);
  EXPECT_EQ(key, NodeKey("secret", "node-0"));
  EXPECT_TRUE(IsNodeKey("secret", "node-0", key));
  EXPECT_FALSE(IsNodeKey("secret", "node-1", key));
  EXPECT_FALSE(IsNodeKey("other secret", "node-0", key));
  EXPECT_FALSE(IsNodeKey("secret", "node-0", key.substr(1)));
  EXPECT_FALSE(IsNodeKey("secret", "node-0", ""));
  // The run token is no key: the key is not the secret, nor any name's plain digest.
  EXPECT_FALSE(IsNodeKey("secret", "node-0", "secret"));
  EXPECT_NE(NodeKey("secret", "node-0"), NodeKey("secret", "node-00"));
}

}  // namespace
}  // namespace localsgd
