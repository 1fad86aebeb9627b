#include "common/data_plane_tag.h"

#include "common/member_credential.h"
#include "gtest/gtest.h"

namespace localsgd {
namespace {

TEST(DataPlaneTagTest, ATagNamesItsKeySenderReceiverAndAttempt) {
  const DataPlaneStream stream{"run-1", 3, 77, "a/0", "b/0"};
  const std::string tag = DataPlaneTag("key-a", stream);
  EXPECT_EQ(tag.size(), 64u);
  EXPECT_EQ(DataPlaneTag("key-a", stream), tag);  // deterministic
  EXPECT_NE(DataPlaneTag("key-b", stream), tag);
  for (DataPlaneStream other : {DataPlaneStream{"run-2", 3, 77, "a/0", "b/0"},
                                DataPlaneStream{"run-1", 4, 77, "a/0", "b/0"},
                                DataPlaneStream{"run-1", 3, 78, "a/0", "b/0"},
                                DataPlaneStream{"run-1", 3, 77, "c/0", "b/0"},
                                DataPlaneStream{"run-1", 3, 77, "a/0", "c/0"}}) {
    EXPECT_NE(DataPlaneTag("key-a", other), tag) << other.receiver << other.attempt;
  }
  EXPECT_TRUE(DataPlaneTagMatches(tag, tag));
  EXPECT_FALSE(DataPlaneTagMatches(tag.substr(1), tag));
  EXPECT_FALSE(DataPlaneTagMatches("", tag));
  EXPECT_FALSE(DataPlaneTagMatches("", ""));
}

TEST(DataPlaneTagTest, AMembersKeyIsItsCredentialsDigest) {
  // The coordinator keeps the digest, never the credential; the member derives the same key.
  EXPECT_EQ(DataPlaneKey("credential-1"), MemberCredentialDigest("credential-1"));
  EXPECT_NE(DataPlaneKey("credential-1"), DataPlaneKey("credential-2"));
}

}  // namespace
}  // namespace localsgd
