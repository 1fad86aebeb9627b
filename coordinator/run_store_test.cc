#include "coordinator/run_store.h"

#include <cstdlib>

#include "common/file_util.h"
#include "gtest/gtest.h"
#include "tests/testutil/status_matchers.h"

namespace localsgd {
namespace {

using ::localsgd::testing::IsOk;
using ::localsgd::testing::StatusIs;

std::string Dir(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

TEST(RunStoreTest, EmptyDirectoryHasNoRun) {
  auto store = RunStore::Open(Dir("empty/nested"));
  ASSERT_THAT(store, IsOk());
  auto loaded = store->Load();
  ASSERT_THAT(loaded, IsOk());
  EXPECT_FALSE(loaded->has_value());
}

TEST(RunStoreTest, SaveThenLoad) {
  auto store = RunStore::Open(Dir("saved"));
  ASSERT_THAT(store, IsOk());
  v1::SavedState state;
  v1::RunInfo& run = *state.mutable_run();
  run.set_run_id("run-1");
  run.set_state(v1::RUN_STATE_RUNNING);
  run.set_round(7);
  run.mutable_spec()->mutable_model()->set_builtin("cnn");
  v1::MemberStatus& member = *state.add_members();
  member.mutable_identity()->set_node_name("node-0");
  member.mutable_identity()->set_local_world_size(2);
  member.set_generation(3);
  ASSERT_THAT(store->Save(state), IsOk());
  auto reopened = RunStore::Open(Dir("saved"));
  auto loaded = reopened->Load();
  ASSERT_THAT(loaded, IsOk());
  ASSERT_TRUE(loaded->has_value());
  EXPECT_EQ((*loaded)->SerializeAsString(), state.SerializeAsString());
}

TEST(RunStoreTest, CorruptFileIsDataLoss) {
  auto store = RunStore::Open(Dir("corrupt"));
  ASSERT_THAT(store, IsOk());
  // Checksummed, but not a SavedState.
  ASSERT_THAT(WriteChecksummedFile(store->path(), "run { run_id: \"x\" state: RUN_STATE_"), IsOk());
  EXPECT_THAT(store->Load(), StatusIs(absl::StatusCode::kDataLoss, "state.textproto"));
}

TEST(RunStoreTest, TruncatedFileIsDataLossNotAnOlderState) {
  auto store = RunStore::Open(Dir("truncated"));
  ASSERT_THAT(store, IsOk());
  v1::SavedState state;
  state.mutable_run()->set_run_id("run-1");
  state.mutable_run()->set_round(12);
  state.mutable_run()->set_global_step(96);
  ASSERT_THAT(store->Save(state), IsOk());
  std::string text = *ReadFile(store->path(), 1 << 30);
  // The length and checksum in the header catch the cut before any parsing.
  text.resize(text.rfind("global_step"));
  ASSERT_THAT(WriteFileAtomically(store->path(), text), IsOk());
  EXPECT_THAT(store->Load(), StatusIs(absl::StatusCode::kDataLoss, "truncated"));
}

TEST(RunStoreTest, StateDirThatIsAFileIsRefused) {
  ASSERT_THAT(WriteFileAtomically(Dir("plainfile"), "x"), IsOk());
  EXPECT_THAT(RunStore::Open(Dir("plainfile")),
              StatusIs(absl::StatusCode::kFailedPrecondition, "--state_dir"));
}

}  // namespace
}  // namespace localsgd
