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

TEST(HeldModelTest, ServesTheRoundItHoldsUntilItMovesOn) {
  HeldModel held;
  EXPECT_TRUE(absl::IsFailedPrecondition(held.Check("run", 0).status()));
  held.Install("run", 3, 12, {1, 2, 3, 4}, {5, 6, 7, 8});
  absl::StatusOr<HeldModel::Label> label = held.Check("run", 3);
  ASSERT_TRUE(label.ok()) << label.status();
  EXPECT_EQ(label->global_step, 12);
  EXPECT_EQ(label->num_values, 4);
  EXPECT_TRUE(label->has_momentum);
  std::string bytes;
  ASSERT_TRUE(held.Read("run", 3, false, 1, 2, &bytes).ok());
  EXPECT_EQ(Floats(bytes), (std::vector<float>{2, 3}));
  ASSERT_TRUE(held.Read("run", 3, true, 2, 2, &bytes).ok());
  EXPECT_EQ(Floats(bytes), (std::vector<float>{7, 8}));

  held.Commit(4, 16, [&] { held.values()[0] = 9; });
  EXPECT_EQ(held.round(), 4);
  EXPECT_EQ(held.global_step(), 16);
  const absl::Status moved = held.Read("run", 3, false, 0, 1, &bytes);
  EXPECT_TRUE(absl::IsFailedPrecondition(moved)) << moved;
  EXPECT_NE(moved.message().find("holds round 4"), std::string::npos) << moved;
  ASSERT_TRUE(held.Read("run", 4, false, 0, 1, &bytes).ok());
  EXPECT_EQ(Floats(bytes), (std::vector<float>{9}));
  EXPECT_TRUE(absl::IsFailedPrecondition(held.Check("other", 4).status()));
}

TEST(HeldModelTest, RefusesValuesItDoesNotHave) {
  HeldModel held;
  held.Install("run", 0, 0, {1, 2}, {});
  std::string bytes;
  EXPECT_TRUE(absl::IsInvalidArgument(held.Read("run", 0, false, 1, 2, &bytes)));
  EXPECT_TRUE(absl::IsInvalidArgument(held.Read("run", 0, false, -1, 1, &bytes)));
  EXPECT_TRUE(absl::IsInvalidArgument(held.Read("run", 0, true, 0, 1, &bytes)));
  EXPECT_FALSE(held.Check("run", 0)->has_momentum);
}

}  // namespace
}  // namespace localsgd
