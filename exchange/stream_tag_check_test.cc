#include "exchange/stream_tag_check.h"

#include "common/data_plane_tag.h"
#include "gtest/gtest.h"
#include "tests/testutil/status_matchers.h"

namespace localsgd {
namespace {

using ::localsgd::testing::IsOk;
using ::localsgd::testing::StatusIs;

v1::ReduceHeader Header(const std::string& tag, uint64_t attempt = 4) {
  v1::ReduceHeader header;
  header.set_run_id("run");
  header.set_round(7);
  header.set_attempt(attempt);
  header.set_member_id("a/0");
  header.set_member_tag(tag);
  return header;
}

TEST(StreamTagCheckTest, OnlyTheTagMadeUnderThisMembersKeyForTheseNamesPasses) {
  std::string credential = "credential-of-b";
  StreamTagCheck check([&] { return StreamTagCheck::Identity{"b/0", credential}; });
  // What the coordinator puts in a's RoundHeader for its stream to b.
  const std::string good =
      DataPlaneTag(DataPlaneKey(credential), DataPlaneStream{"run", 7, 4, "a/0", "b/0"});
  EXPECT_THAT(check.Check(Header(good)), IsOk());
  EXPECT_THAT(check.Check(Header(good, 5)),  // another attempt
              StatusIs(absl::StatusCode::kPermissionDenied, "member_tag"));
  EXPECT_THAT(check.Check(Header("")), StatusIs(absl::StatusCode::kPermissionDenied, "a/0 to b/0"));
  // A tag for another receiver, or made under another key (a member's own), is refused.
  EXPECT_THAT(check.Check(Header(DataPlaneTag(DataPlaneKey(credential),
                                              DataPlaneStream{"run", 7, 4, "a/0", "c/0"}))),
              StatusIs(absl::StatusCode::kPermissionDenied, ""));
  EXPECT_THAT(check.Check(Header(DataPlaneTag(DataPlaneKey("credential-of-a"),
                                              DataPlaneStream{"run", 7, 4, "a/0", "b/0"}))),
              StatusIs(absl::StatusCode::kPermissionDenied, ""));
  // b joined again: its new key applies.
  credential = "new-credential-of-b";
  EXPECT_THAT(check.Check(Header(good)), StatusIs(absl::StatusCode::kPermissionDenied, ""));
  // No identity yet: nothing passes.
  EXPECT_THAT(StreamTagCheck({}).Check(Header(good)),
              StatusIs(absl::StatusCode::kPermissionDenied, ""));
}

}  // namespace
}  // namespace localsgd
