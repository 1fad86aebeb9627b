// The state writer with real files: order, durability callbacks, coalesced run records.
#include "coordinator/state_writer.h"

#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "common/mutex.h"
#include "gtest/gtest.h"
#include "tests/testutil/status_matchers.h"
#include "tests/testutil/wait_for.h"

namespace localsgd {
namespace {

using ::localsgd::testing::IsOk;
using ::localsgd::testing::StatusIs;

std::shared_ptr<const ModelSnapshot> Model(const std::string& run_id, int64_t round) {
  auto model = std::make_shared<ModelSnapshot>();
  model->run_id = run_id;
  model->round = round;
  model->global_step = 10 * round;
  model->values = std::make_shared<const std::vector<float>>(4, static_cast<float>(round));
  return model;
}

StateSnapshot Record(const std::string& run_id, int64_t round) {
  StateSnapshot state;
  state.run.set_run_id(run_id);
  state.run.set_round(round);
  return state;
}

class StateWriterTest : public ::testing::Test {
 protected:
  std::unique_ptr<StateWriter> Open(const std::string& name, double model_save_share = 1) {
    dir_ = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
    StateWriter::Options options;
    options.state_dir = dir_;
    options.model_save_share = model_save_share;
    options.before_write = [this](const std::string& file) {
      {
        MutexLock lock(&mu_);
        writes_.push_back(file);
      }
      if (blocked_ && (!models_only_ || file != "state.textproto")) {
        release_.WaitForNotification();
      }
    };
    absl::StatusOr<std::unique_ptr<StateWriter>> writer = StateWriter::Open(options);
    EXPECT_THAT(writer, IsOk());
    return std::move(*writer);
  }
  std::vector<std::string> writes() {
    MutexLock lock(&mu_);
    return writes_;
  }

  std::string dir_;
  std::atomic<bool> blocked_{false};
  std::atomic<bool> models_only_{false};  // blocked_ holds up models, not the run record
  absl::Notification release_;
  Mutex mu_;
  std::vector<std::string> writes_ ABSL_GUARDED_BY(mu_);
};

TEST_F(StateWriterTest, AModelIsAnnouncedDurableOnlyOnceItIsOnDisk) {
  std::unique_ptr<StateWriter> writer = Open("durable");
  blocked_ = true;
  std::atomic<bool> durable{false};
  writer->SaveModel(Model("r", 1), [&](const absl::Status& status) {
    EXPECT_THAT(status, IsOk());
    durable = true;
  });
  EXPECT_TRUE(WaitFor([&] { return !writes().empty(); }, absl::Seconds(5)));
  EXPECT_FALSE(WaitFor([&] { return durable.load(); }, absl::Milliseconds(50)));
  release_.Notify();
  EXPECT_TRUE(WaitFor([&] { return durable.load(); }, absl::Seconds(5)));
  absl::StatusOr<std::optional<ModelCheckpoint>> saved = writer->LoadModel();
  ASSERT_THAT(saved, IsOk());
  ASSERT_TRUE(saved->has_value());
  EXPECT_EQ((*saved)->round, 1);
  EXPECT_EQ((*saved)->global, std::vector<float>(4, 1.0f));
}

// While one model is being written, the models queued after it make one write, of the newest,
// and every caller hears when it is on disk.
TEST_F(StateWriterTest, ModelsQueuedBehindAWriteMakeOneWriteOfTheNewest) {
  std::unique_ptr<StateWriter> writer = Open("supersede");
  blocked_ = true;
  std::atomic<int> durable{0};
  auto count = [&](const absl::Status& status) {
    EXPECT_THAT(status, IsOk());
    ++durable;
  };
  writer->SaveModel(Model("r", 1), count);
  ASSERT_TRUE(WaitFor([&] { return !writes().empty(); }, absl::Seconds(5)));
  for (int round = 2; round <= 5; ++round) writer->SaveModel(Model("r", round), count);
  writer->ArchiveModel(Model("q", 9));  // not a model.bin: never replaced, never replaces
  writer->SaveModel(Model("r", 6), nullptr);
  blocked_ = false;
  release_.Notify();
  ASSERT_TRUE(WaitFor([&] { return durable.load() == 5; }, absl::Seconds(5)));
  EXPECT_TRUE(WaitFor([&] { return writes().size() == 3; }, absl::Seconds(5)));
  EXPECT_EQ(writes(), (std::vector<std::string>{"model.bin", "model.bin", "runs"}));
  absl::StatusOr<std::optional<ModelCheckpoint>> saved = writer->LoadModel();
  ASSERT_THAT(saved, IsOk());
  ASSERT_TRUE(saved->has_value());
  EXPECT_EQ((*saved)->round, 6);
}

// A model saved later waits for its turn (here: a share so small that the turn never comes
// within the test) without holding up the run record; FlushModel, a SaveModel and the writer's
// end each write it at once.
TEST_F(StateWriterTest, AModelSavedLaterWaitsForItsTurnButNotTheRecord) {
  std::atomic<int> durable{0};
  auto count = [&](const absl::Status& status) {
    EXPECT_THAT(status, IsOk());
    ++durable;
  };
  {
    std::unique_ptr<StateWriter> writer = Open("later", /*model_save_share=*/1e-9);
    writer->SetStateSource([] { return Record("r", 1); });
    writer->SaveModel(Model("r", 1), count);
    ASSERT_TRUE(WaitFor([&] { return durable.load() == 1; }, absl::Seconds(5)));
    writer->SaveModelLater(Model("r", 2), count);
    writer->AwaitState(writer->StateChanged());  // not behind the waiting model
    EXPECT_FALSE(WaitFor([&] { return durable.load() == 2; }, absl::Milliseconds(100)));
    writer->FlushModel();
    ASSERT_TRUE(WaitFor([&] { return durable.load() == 2; }, absl::Seconds(5)));
    EXPECT_EQ((*writer->LoadModel())->round, 2);

    writer->SaveModelLater(Model("r", 3), count);
    writer->SaveModel(Model("r", 4), count);  // supersedes 3, and is not kept waiting
    ASSERT_TRUE(WaitFor([&] { return durable.load() == 4; }, absl::Seconds(5)));
    EXPECT_EQ((*writer->LoadModel())->round, 4);

    writer->SaveModelLater(Model("r", 5), count);
    writer->SetStateSource(nullptr);
  }  // the writer's end writes it
  EXPECT_EQ(durable.load(), 5);
  std::unique_ptr<StateWriter> reopened = Open("later");
  EXPECT_EQ((*reopened->LoadModel())->round, 5);
  EXPECT_THAT(StateWriter::Open(StateWriter::Options{dir_, nullptr, 0}),
              StatusIs(absl::StatusCode::kInvalidArgument, "model_save_share"));
}

// While a write of the run record blocks, a hundred changes make one more write, of the
// newest record; AwaitState returns once it is written.
TEST_F(StateWriterTest, RecordChangesCoalesce) {
  std::unique_ptr<StateWriter> writer = Open("coalesce");
  std::atomic<int> round{1};
  std::atomic<int> asked{0};
  writer->SetStateSource([&] {
    ++asked;
    return Record("r", round.load());
  });
  blocked_ = true;
  writer->StateChanged();
  ASSERT_TRUE(WaitFor([&] { return !writes().empty(); }, absl::Seconds(5)));
  int64_t ticket = 0;
  for (int i = 2; i <= 100; ++i) {
    round = i;
    ticket = writer->StateChanged();
  }
  blocked_ = false;
  release_.Notify();
  writer->AwaitState(ticket);
  EXPECT_EQ(asked.load(), 2);
  EXPECT_EQ(writes(), (std::vector<std::string>{"state.textproto", "state.textproto"}));
  absl::StatusOr<std::optional<v1::SavedState>> saved = writer->LoadState();
  ASSERT_THAT(saved, IsOk());
  ASSERT_TRUE(saved->has_value());
  EXPECT_EQ((*saved)->run().round(), 100);
  // The same record again is not written again.
  writer->AwaitState(writer->StateChanged());
  EXPECT_EQ(writes().size(), 2u);
  writer->SetStateSource(nullptr);
}

// The run record never waits behind a model being written: a commit's announcement waits for
// its record (SaveStateThen), never for a model of gigabytes.
TEST_F(StateWriterTest, TheRunRecordIsWrittenWhileAModelIsBeingWritten) {
  std::unique_ptr<StateWriter> writer = Open("beside");
  writer->SetStateSource([] { return Record("r", 5); });
  models_only_ = true;
  blocked_ = true;
  std::atomic<bool> model_durable{false};
  writer->SaveModel(Model("r", 4), [&](const absl::Status&) { model_durable = true; });
  ASSERT_TRUE(WaitFor([&] { return !writes().empty(); }, absl::Seconds(5)));
  std::atomic<bool> recorded{false};
  writer->SaveStateThen([&](const absl::Status& status) {
    EXPECT_THAT(status, IsOk());
    recorded = true;
  });
  EXPECT_TRUE(WaitFor([&] { return recorded.load(); }, absl::Seconds(5)));
  EXPECT_FALSE(model_durable.load());
  EXPECT_EQ((*writer->LoadState())->run().round(), 5);
  blocked_ = false;
  release_.Notify();
  EXPECT_TRUE(WaitFor([&] { return model_durable.load(); }, absl::Seconds(5)));
  writer->SetStateSource(nullptr);
}

TEST_F(StateWriterTest, TheSavedRecordSurvivesANewWriterAndEverythingQueuedIsWrittenAtTheEnd) {
  {
    std::unique_ptr<StateWriter> writer = Open("reopen");
    writer->SetStateSource([] { return Record("r", 7); });
    writer->StateChanged();
    writer->SaveModel(Model("r", 7), nullptr);
    writer->SetStateSource(nullptr);  // after the queued change was taken or skipped
  }
  std::unique_ptr<StateWriter> reopened = Open("reopen");
  absl::StatusOr<std::optional<ModelCheckpoint>> model = reopened->LoadModel();
  ASSERT_THAT(model, IsOk());
  ASSERT_TRUE(model->has_value());
  EXPECT_EQ((*model)->round, 7);
}

}  // namespace
}  // namespace localsgd
