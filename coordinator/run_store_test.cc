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
  v1::RunInfo run;
  run.set_run_id("run-1");
  run.set_state(v1::RUN_STATE_RUNNING);
  run.set_round(7);
  run.mutable_spec()->mutable_model()->set_builtin("cnn");
  ASSERT_THAT(store->Save(run), IsOk());
  auto reopened = RunStore::Open(Dir("saved"));
  auto loaded = reopened->Load();
  ASSERT_THAT(loaded, IsOk());
  ASSERT_TRUE(loaded->has_value());
  EXPECT_EQ((*loaded)->SerializeAsString(), run.SerializeAsString());
}

TEST(RunStoreTest, CorruptFileIsDataLoss) {
  auto store = RunStore::Open(Dir("corrupt"));
  ASSERT_THAT(store, IsOk());
  ASSERT_THAT(WriteFileAtomically(store->path(), "run_id: \"x\" state: RUN_STATE_"), IsOk());
  EXPECT_THAT(store->Load(), StatusIs(absl::StatusCode::kDataLoss, "run.textproto"));
}

TEST(RunStoreTest, StateDirThatIsAFileIsRefused) {
  ASSERT_THAT(WriteFileAtomically(Dir("plainfile"), "x"), IsOk());
  EXPECT_THAT(RunStore::Open(Dir("plainfile")),
              StatusIs(absl::StatusCode::kFailedPrecondition, "--state_dir"));
}

}  // namespace
}  // namespace localsgd
