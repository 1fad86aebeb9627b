#include "common/write_batch.h"

#include <vector>

#include "gtest/gtest.h"

namespace localsgd {
namespace {

// For each message: whether it was given the hint (held for the next write).
std::vector<bool> Held(WriteBatch& batch, const std::vector<bool>& more, int64_t bytes) {
  std::vector<bool> held;
  for (bool m : more) held.push_back(batch.Next(bytes, m).get_buffer_hint());
  return held;
}

TEST(WriteBatchTest, AMessageWithNothingReadyBehindItGoesOutAtOnce) {
  WriteBatch batch(1000);
  EXPECT_EQ(Held(batch, {false, false}, 100), (std::vector<bool>{false, false}));
  // The last of a burst goes out, and with it those held before it.
  EXPECT_EQ(Held(batch, {true, true, false}, 100), (std::vector<bool>{true, true, false}));
}

TEST(WriteBatchTest, AtMostTheBoundIsHeldInARow) {
  WriteBatch batch(350);
  // 100 bytes each: three are held (300), the fourth would make 400 and goes out with them.
  EXPECT_EQ(Held(batch, {true, true, true, true, true, true, true, true}, 100),
            (std::vector<bool>{true, true, true, false, true, true, true, false}));
}

TEST(WriteBatchTest, AMessageAsLargeAsTheBoundIsNeverHeld) {
  WriteBatch batch(1 << 20);
  EXPECT_EQ(Held(batch, {true, true}, 1 << 20), (std::vector<bool>{false, false}));
}

}  // namespace
}  // namespace localsgd
