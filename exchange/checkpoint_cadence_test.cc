#include "exchange/checkpoint_cadence.h"

#include "gtest/gtest.h"

namespace localsgd {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1000);

// The round a node starts from is where the count begins: it is not written itself.
TEST(CheckpointCadenceTest, RoundsCountFromTheRoundTheNodeStartedFrom) {
  CheckpointCadence cadence(2, 0.05);
  cadence.Begin(7);
  EXPECT_FALSE(cadence.Due(7, kStart));
  EXPECT_FALSE(cadence.Due(8, kStart));
  EXPECT_TRUE(cadence.Due(9, kStart));
}

TEST(CheckpointCadenceTest, ARoundIsDueEveryRoundsAfterTheLastWritten) {
  CheckpointCadence cadence(3, 1.0);
  cadence.Wrote(4, kStart, kStart);
  EXPECT_FALSE(cadence.Due(5, kStart));
  EXPECT_FALSE(cadence.Due(6, kStart));
  EXPECT_TRUE(cadence.Due(7, kStart));
  EXPECT_TRUE(cadence.Due(9, kStart));  // a round skipped: a later one is due at once
}

// Writes take at most `share` of the time: a write of 2 s at share 0.05 allows the next 38 s
// after it ended, whatever the rounds.
TEST(CheckpointCadenceTest, WritesTakeAtMostTheirShareOfTheTime) {
  CheckpointCadence cadence(1, 0.05);
  cadence.Wrote(1, kStart, kStart + absl::Seconds(2));
  EXPECT_EQ(cadence.next_allowed(), kStart + absl::Seconds(40));
  EXPECT_FALSE(cadence.Due(50, kStart + absl::Seconds(39)));
  EXPECT_TRUE(cadence.Due(50, kStart + absl::Seconds(40)));
  // Share 1: back to back.
  CheckpointCadence always(1, 1.0);
  always.Wrote(1, kStart, kStart + absl::Seconds(2));
  EXPECT_TRUE(always.Due(2, kStart + absl::Seconds(2)));
}

}  // namespace
}  // namespace localsgd
