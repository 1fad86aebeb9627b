#include "coordinator/digest_vote.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace localsgd {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr DigestPair kA{1, 11};
constexpr DigestPair kB{2, 22};
constexpr DigestPair kC{3, 33};

std::vector<std::string> Differing(const DigestVote& vote) {
  std::vector<std::string> ids;
  for (const DigestVote::Differing& d : vote.differing) ids.push_back(d.member_id);
  return ids;
}

TEST(DigestVoteTest, AgreeingCopiesNameNoOne) {
  const DigestVote vote =
      VoteOnDigests({{"m0", {kA, kB}}, {"m1", {kA, kB}}, {"m2", {kA, kB}}}, {kA, kB});
  EXPECT_THAT(vote.agreed, ElementsAre(kA, kB));
  EXPECT_THAT(vote.differing, IsEmpty());
}

TEST(DigestVoteTest, TheMajorityDecidesEvenAgainstTheTieBreaker) {
  // m0 alone holds another copy of range 0; the tie-breaker holds a third: the majority's
  // copy stands.
  const DigestVote vote =
      VoteOnDigests({{"m0", {kC, kB}}, {"m1", {kA, kB}}, {"m2", {kA, kB}}}, {kB, kB});
  EXPECT_THAT(vote.agreed, ElementsAre(kA, kB));
  ASSERT_THAT(Differing(vote), ElementsAre("m0"));
  EXPECT_THAT(vote.differing[0].ranges, ElementsAre(0));
}

TEST(DigestVoteTest, WithoutAMajorityTheTieBreakerStands) {
  // Two members disagree on range 0: the tie-breaker's copy is m0's.
  DigestVote vote = VoteOnDigests({{"m0", {kA, kB}}, {"m1", {kC, kB}}}, {kA, kB});
  EXPECT_THAT(vote.agreed, ElementsAre(kA, kB));
  ASSERT_THAT(Differing(vote), ElementsAre("m1"));
  EXPECT_THAT(vote.differing[0].ranges, ElementsAre(0));
  // Four members split two and two.
  vote = VoteOnDigests({{"m0", {kA}}, {"m1", {kB}}, {"m2", {kB}}, {"m3", {kA}}}, {kA});
  EXPECT_THAT(vote.agreed, ElementsAre(kA));
  EXPECT_THAT(Differing(vote), ElementsAre("m1", "m2"));
}

TEST(DigestVoteTest, NoMajorityAndNoTieBreakerLeavesTheRangeUnagreedAndEveryoneNamed) {
  const DigestVote vote =
      VoteOnDigests({{"m1", {kA, kB}}, {"m2", {kC, kB}}}, {std::nullopt, std::nullopt});
  EXPECT_FALSE(vote.agreed[0].has_value());
  EXPECT_THAT(vote.agreed[1], ::testing::Optional(kB));  // a majority needs no tie-breaker
  EXPECT_THAT(Differing(vote), ElementsAre("m1", "m2"));
}

TEST(DigestVoteTest, ABallotShortOfRangesDiffersWhereItHasNone) {
  const DigestVote vote =
      VoteOnDigests({{"m0", {kA, kB}}, {"m1", {kA}}, {"m2", {kA, kB}}}, {kA, kB});
  EXPECT_THAT(vote.agreed, ElementsAre(kA, kB));
  ASSERT_THAT(Differing(vote), ElementsAre("m1"));
  EXPECT_THAT(vote.differing[0].ranges, ElementsAre(1));
}

}  // namespace
}  // namespace localsgd
