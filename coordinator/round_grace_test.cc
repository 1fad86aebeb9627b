#include "coordinator/round_grace.h"

#include <gtest/gtest.h>

namespace localsgd {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(RoundGraceTest, WithoutGraceWindowNeverEnds) {
  EXPECT_EQ(RoundGrace().Ends({kT0, kT0, kT0}, 3), absl::InfiniteFuture());
}

TEST(RoundGraceTest, EndsGraceAfterTheQuorumsLastArrival) {
  const RoundGrace grace(absl::Seconds(2), 0.5);
  EXPECT_EQ(grace.Quorum(4), 2);
  EXPECT_EQ(grace.Ends({kT0 + absl::Seconds(5)}, 4), absl::InfiniteFuture());
  // Arrivals in any order: the second one (the quorum of 4) starts the window.
  EXPECT_EQ(grace.Ends({kT0 + absl::Seconds(5), kT0 + absl::Seconds(1)}, 4),
            kT0 + absl::Seconds(7));
  EXPECT_EQ(grace.Ends({kT0 + absl::Seconds(5), kT0 + absl::Seconds(1), kT0 + absl::Seconds(3)}, 4),
            kT0 + absl::Seconds(5));
}

TEST(RoundGraceTest, QuorumRoundsUpAndIsAtLeastOne) {
  EXPECT_EQ(RoundGrace(absl::Seconds(1), 0.5).Quorum(3), 2);
  EXPECT_EQ(RoundGrace(absl::Seconds(1), 0.5).Quorum(1), 1);
  EXPECT_EQ(RoundGrace(absl::Seconds(1), 0.01).Quorum(4), 1);
  EXPECT_EQ(RoundGrace(absl::Seconds(1), 1.0).Quorum(4), 4);
  EXPECT_EQ(RoundGrace(absl::Seconds(1), 0.75).Quorum(4), 3);
}

TEST(RoundGraceTest, FromSpec) {
  v1::RunSpec spec;
  spec.set_round_grace_seconds(1.5);
  spec.set_round_quorum_fraction(1.0);
  const RoundGrace grace = RoundGrace::Of(spec);
  EXPECT_EQ(grace.Ends({kT0, kT0 + absl::Seconds(1)}, 2), kT0 + absl::Seconds(2.5));
  EXPECT_EQ(grace.Reason(2), "did not arrive within the grace window (1.5s after 2 of 2 members)");
}

}  // namespace
}  // namespace localsgd
