#include "exchange/checkpoint_cadence.h"

#include "gtest/gtest.h"

namespace localsgd {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1000);

// The multiples of every_rounds after the round a node starts from, which is not written: every
// node writes the same rounds, wherever it started.
TEST(CheckpointCadenceTest, TheMultiplesOfEveryRoundsAfterTheStartAreDue) {
  CheckpointCadence cadence(3, 0.05);
  cadence.Begin(6, kStart);
  EXPECT_FALSE(cadence.Due(6));
  EXPECT_FALSE(cadence.Due(7));
  EXPECT_FALSE(cadence.Due(8));
  EXPECT_TRUE(cadence.Due(9));
  EXPECT_FALSE(cadence.Due(10));
  EXPECT_TRUE(cadence.Due(12));
}

// A write of 2 s at share 0.05 needs 40 s of rounds: rounds of 3 s (from the start to the
// write) make the period the least power-of-two multiple of every_rounds over 13.3 rounds.
TEST(CheckpointCadenceTest, ThePeriodKeepsTheWritesToTheirShare) {
  CheckpointCadence cadence(1, 0.05);
  cadence.Begin(0, kStart);
  cadence.Wrote(4, kStart + absl::Seconds(12), kStart + absl::Seconds(14));
  EXPECT_EQ(cadence.period(), 16);
  EXPECT_FALSE(cadence.Due(8));
  EXPECT_TRUE(cadence.Due(16));
  // Rounds slow to 10 s (16 rounds from that write to the next): 4 rounds cover 40 s.
  cadence.Wrote(16, kStart + absl::Seconds(172), kStart + absl::Seconds(174));
  EXPECT_EQ(cadence.period(), 4);
  EXPECT_TRUE(cadence.Due(20));
  // every_rounds 3: periods of 3, 6, 12, ...
  CheckpointCadence threes(3, 0.05);
  threes.Begin(0, kStart);
  threes.Wrote(3, kStart + absl::Seconds(9), kStart + absl::Seconds(11));  // 40 s: 13.3 rounds
  EXPECT_EQ(threes.period(), 24);
}

// Nodes whose writes take different times pick periods that nest: the slower node's rounds are
// among the faster one's.
TEST(CheckpointCadenceTest, NodesOfDifferentDisksWriteInTheSameRounds) {
  CheckpointCadence fast(1, 0.05), slow(1, 0.05);
  fast.Begin(0, kStart);
  slow.Begin(0, kStart);
  fast.Wrote(1, kStart + absl::Seconds(1), kStart + absl::Seconds(1.2));  // needs 4 rounds
  slow.Wrote(1, kStart + absl::Seconds(1), kStart + absl::Seconds(1.7));  // needs 14 rounds
  EXPECT_EQ(fast.period(), 4);
  EXPECT_EQ(slow.period(), 16);
  for (int64_t round = 2; round < 100; ++round) {
    if (slow.Due(round)) EXPECT_TRUE(fast.Due(round)) << round;
  }
}

// Share 1: every every_rounds-th round, however long the writes take; a round skipped (the
// writer was busy) leaves the next multiple due.
TEST(CheckpointCadenceTest, ShareOneWritesEveryRoundsWhateverTheTime) {
  CheckpointCadence cadence(2, 1.0);
  cadence.Begin(0, kStart);
  cadence.Wrote(2, kStart + absl::Seconds(1), kStart + absl::Seconds(100));
  EXPECT_EQ(cadence.period(), 2);
  EXPECT_FALSE(cadence.Due(2));
  EXPECT_FALSE(cadence.Due(3));
  EXPECT_TRUE(cadence.Due(4));
  EXPECT_TRUE(cadence.Due(6));
}

}  // namespace
}  // namespace localsgd
