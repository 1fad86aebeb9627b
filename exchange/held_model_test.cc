#include "exchange/held_model.h"

#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace localsgd {
namespace {

std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

TEST(HeldModelTest, ALeaseReadsItsRoundToTheEndWhileTheModelMovesOn) {
  HeldModel held;
  EXPECT_TRUE(absl::IsFailedPrecondition(held.Open("run", 0, 2, 0, 1, false).status()));
  held.Install("run", 3, 12, {1, 2, 3, 4, 5}, {6, 7, 8, 9, 10});
  // Chunks of 2 values: [1 2] [3 4] [5].
  absl::StatusOr<HeldModel::Lease> lease = held.Open("run", 3, 2, 1, 3, true);
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_EQ(lease->global_step, 12);
  EXPECT_EQ(lease->layout.num_values, 5);
  EXPECT_TRUE(lease->has_momentum);
  std::string bytes;
  ASSERT_EQ(*held.Read(lease->id, false, &bytes), 1);
  EXPECT_EQ(Floats(bytes), (std::vector<float>{3, 4}));

  // The next round commits: the lease still reads round 3; a new one is refused.
  held.Commit(4, 16, [&] {
    for (float& v : held.values()) v += 100;
    for (float& v : held.momentum()) v += 100;
  });
  EXPECT_EQ(held.round(), 4);
  EXPECT_EQ(held.global_step(), 16);
  ASSERT_EQ(*held.Read(lease->id, false, &bytes), 2);
  EXPECT_EQ(Floats(bytes), (std::vector<float>{5}));
  EXPECT_TRUE(absl::IsOutOfRange(held.Read(lease->id, false, &bytes).status()));
  ASSERT_EQ(*held.Read(lease->id, true, &bytes), 1);
  EXPECT_EQ(Floats(bytes), (std::vector<float>{8, 9}));
  ASSERT_EQ(*held.Read(lease->id, true, &bytes), 2);
  EXPECT_EQ(Floats(bytes), (std::vector<float>{10}));
  held.Close(lease->id);

  const absl::Status moved = held.Open("run", 3, 2, 0, 1, false).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(moved)) << moved;
  EXPECT_NE(moved.message().find("holds round 4"), std::string::npos) << moved;
  lease = held.Open("run", 4, 2, 0, 1, false);
  ASSERT_TRUE(lease.ok());
  ASSERT_EQ(*held.Read(lease->id, false, &bytes), 0);
  EXPECT_EQ(Floats(bytes), (std::vector<float>{101, 102}));
  EXPECT_TRUE(absl::IsInvalidArgument(held.Read(lease->id, true, &bytes).status()));
  EXPECT_TRUE(absl::IsFailedPrecondition(held.Open("other", 4, 2, 0, 1, false).status()));
}

TEST(HeldModelTest, AnAdoptionKeepsWhatOpenLeasesHaveYetToRead) {
  HeldModel held;
  held.Install("run", 1, 8, {1, 2, 3, 4}, {});
  absl::StatusOr<HeldModel::Lease> lease = held.Open("run", 1, 2, 0, 2, true);
  ASSERT_TRUE(lease.ok());
  EXPECT_FALSE(lease->has_momentum);  // none held
  held.Install("run", 5, 40, {9, 9, 9, 9}, {});
  std::string bytes;
  ASSERT_EQ(*held.Read(lease->id, false, &bytes), 0);
  EXPECT_EQ(Floats(bytes), (std::vector<float>{1, 2}));
  ASSERT_EQ(*held.Read(lease->id, false, &bytes), 1);
  EXPECT_EQ(Floats(bytes), (std::vector<float>{3, 4}));
}

TEST(HeldModelTest, RefusesChunksItDoesNotHave) {
  HeldModel held;
  held.Install("run", 0, 0, {1, 2, 3}, {});
  EXPECT_TRUE(absl::IsInvalidArgument(held.Open("run", 0, 2, 0, 3, false).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(held.Open("run", 0, 2, -1, 1, false).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(held.Open("run", 0, 2, 1, 0, false).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(held.Open("run", 0, 0, 0, 1, false).status()));
  absl::StatusOr<HeldModel::Lease> empty = held.Open("run", 0, 2, 2, 2, false);
  ASSERT_TRUE(empty.ok());
  std::string bytes;
  EXPECT_TRUE(absl::IsOutOfRange(held.Read(empty->id, false, &bytes).status()));
  held.Commit(1, 8, [] {});  // nothing left to copy aside
  EXPECT_TRUE(absl::IsInvalidArgument(held.Read(12345, false, &bytes).status()));
}

}  // namespace
}  // namespace localsgd
