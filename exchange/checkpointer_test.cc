#include "exchange/checkpointer.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "common/file_util.h"
#include "common/model_store.h"
#include "gtest/gtest.h"
#include "tests/testutil/status_matchers.h"

namespace localsgd {
namespace {

using ::localsgd::testing::IsOk;
using ::localsgd::testing::StatusIs;

std::string Folder(const std::string& name) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  EXPECT_THAT(MakeDirectories(dir), IsOk());
  return dir;
}

std::vector<float> Ramp(int n, float from) {
  std::vector<float> values(n);
  for (int i = 0; i < n; ++i) values[i] = from + static_cast<float>(i);
  return values;
}

ModelCheckpoint Load(const std::string& path) {
  auto loaded = ModelStore::At(path).Load();
  EXPECT_THAT(loaded, IsOk());
  return loaded.ok() && loaded->has_value() ? **loaded : ModelCheckpoint{};
}

// Waits (up to 10 s) until the checkpointer wrote round `round`.
bool WroteRound(const Checkpointer& checkpointer, int64_t round) {
  for (absl::Time give_up = absl::Now() + absl::Seconds(10); absl::Now() < give_up;
       absl::SleepFor(absl::Milliseconds(5))) {
    if (auto written = checkpointer.last_written(); written && written->round == round) return true;
  }
  return false;
}

// A flush writes the last round offered, model and momentum, bit for bit, with its round and
// global step.
TEST(CheckpointerTest, AFlushWritesTheHeldRound) {
  HeldModel held;
  held.Install("run-1", 3, 24, Ramp(1000, 0.5f), Ramp(1000, -7.25f));
  const std::string path = Folder("flush") + "/checkpoint.bin";
  Checkpointer checkpointer(&held,
                            {path, /*every_rounds=*/100, /*share=*/0.05, /*chunk_values=*/64});
  checkpointer.Offer("run-1", 3, 24);
  ASSERT_THAT(checkpointer.Flush(absl::Seconds(30)), IsOk());
  const ModelCheckpoint saved = Load(path);
  EXPECT_EQ(saved.run_id, "run-1");
  EXPECT_EQ(saved.round, 3);
  EXPECT_EQ(saved.global_step, 24);
  EXPECT_EQ(saved.global, Ramp(1000, 0.5f));
  EXPECT_EQ(saved.momentum, Ramp(1000, -7.25f));
  ASSERT_TRUE(checkpointer.last_written().has_value());
  EXPECT_EQ(checkpointer.last_written()->round, 3);
  EXPECT_THAT(checkpointer.Flush(absl::Seconds(30)), IsOk());  // written already: at once
}

// Rounds are written at the cadence: the multiples of `every_rounds` after the round the node
// started from (the share is 1: whatever the time).
TEST(CheckpointerTest, RoundsAreWrittenEveryRounds) {
  HeldModel held;
  const std::string path = Folder("cadence") + "/checkpoint.bin";
  Checkpointer checkpointer(&held, {path, /*every_rounds=*/3, /*share=*/1.0, /*chunk_values=*/16});
  auto commit = [&](int64_t round) {
    held.Install("run-1", round, 8 * round, Ramp(100, static_cast<float>(round)), {});
    checkpointer.Offer("run-1", round, 8 * round);
  };
  commit(1);  // the round it starts from
  commit(2);
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_FALSE(checkpointer.last_written().has_value());  // not due before round 3
  commit(3);
  ASSERT_TRUE(WroteRound(checkpointer, 3));
  commit(4);
  commit(5);
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(checkpointer.last_written()->round, 3);
  EXPECT_EQ(Load(path).global, Ramp(100, 3.0f));
  EXPECT_TRUE(Load(path).momentum.empty());
  commit(6);
  ASSERT_TRUE(WroteRound(checkpointer, 6));
}

// The model may move on while it is written: the file holds exactly one round, the one it
// names, never a mix.
TEST(CheckpointerTest, ACommitDuringTheWriteLeavesTheFileOneRound) {
  HeldModel held;
  const int n = 1 << 20;
  held.Install("run-1", 1, 8, Ramp(n, 0.0f), {});
  const std::string path = Folder("moving") + "/checkpoint.bin";
  Checkpointer checkpointer(&held, {path, 1, 1.0, /*chunk_values=*/1024});
  for (int64_t round = 1; round <= 20; ++round) {
    if (round > 1) {
      held.Commit(round, 8 * round, [&] {
        for (float& v : held.values()) v += 1;
      });
    }
    checkpointer.Offer("run-1", round, 8 * round);
  }
  ASSERT_THAT(checkpointer.Flush(absl::Seconds(60)), IsOk());
  const ModelCheckpoint saved = Load(path);
  EXPECT_EQ(saved.round, 20);
  EXPECT_EQ(saved.global, Ramp(n, 19.0f));
}

// A folder that cannot be written: the flush says why, naming the file, and the error is kept.
TEST(CheckpointerTest, AFailedWriteIsReportedNotFatal) {
  HeldModel held;
  held.Install("run-1", 2, 16, Ramp(10, 0), {});
  const std::string path = Folder("missing") + "/not-a-folder/checkpoint.bin";
  Checkpointer checkpointer(&held, {path, 1, 0.05, 4});
  checkpointer.Offer("run-1", 2, 16);
  EXPECT_THAT(checkpointer.Flush(absl::Seconds(30)),
              StatusIs(absl::StatusCode::kNotFound, "not-a-folder"));
  EXPECT_THAT(checkpointer.last_error(), StatusIs(absl::StatusCode::kNotFound, "checkpoint.bin"));
  EXPECT_FALSE(checkpointer.last_written().has_value());
}

}  // namespace
}  // namespace localsgd
