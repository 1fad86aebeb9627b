#include "common/member_credential.h"

#include <gtest/gtest.h>

namespace localsgd {
namespace {

TEST(MemberCredentialTest, EachCredentialIsNewAndMatchesOnlyItsDigest) {
  const std::string a = NewMemberCredential();
  const std::string b = NewMemberCredential();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_NE(a, b);
  const std::string digest = MemberCredentialDigest(a);
  EXPECT_NE(digest, a);
  EXPECT_TRUE(MemberCredentialMatches(a, digest));
  EXPECT_FALSE(MemberCredentialMatches(b, digest));
  EXPECT_FALSE(MemberCredentialMatches("", digest));
  EXPECT_FALSE(MemberCredentialMatches(a, ""));
  EXPECT_FALSE(MemberCredentialMatches(digest, digest));
}

TEST(MemberCredentialTest, DigestIsSha256) {
  EXPECT_EQ(MemberCredentialDigest("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
}  // namespace localsgd
