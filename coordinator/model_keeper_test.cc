#include "coordinator/model_keeper.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/status_matchers.h"

namespace localsgd {
namespace {

using ::localsgd::testing::IsOk;
using ::localsgd::testing::StatusIs;
using ::testing::ElementsAre;

v1::RunInfo RunAt(const std::string& id, int64_t round = 0, int64_t step = 0) {
  v1::RunInfo run;
  run.set_run_id(id);
  run.set_round(round);
  run.set_global_step(step);
  run.mutable_spec()->set_chunk_bytes(8);
  run.mutable_spec()->mutable_outer_optimizer()->set_lr(1);
  return run;
}

ControlPlane::Leader Leader(const std::string& id, const std::string& address) {
  ControlPlane::Leader leader;
  leader.worker_id = id;
  leader.data_address = address;
  return leader;
}

TEST(ModelKeeperTest, AnEndedRunsFinalModelIsKeptForTheLastRunsOnly) {
  ModelKeeper keeper(nullptr);
  for (int r = 1; r <= StateWriter::kKeptRunModels + 1; ++r) {
    keeper.StartRun(RunAt(absl::StrCat("run-", r), 2, 16));
    ASSERT_THAT(keeper.active().Install({static_cast<float>(r)}, std::nullopt), IsOk());
  }
  keeper.StartRun(RunAt("run-next"));
  EXPECT_FALSE(keeper.active().initialised());
  EXPECT_EQ(keeper.Find("run-next"), std::nullopt);  // no model yet
  EXPECT_EQ(keeper.Find("run-1"), std::nullopt);     // the oldest, no longer kept
  for (int r = 2; r <= StateWriter::kKeptRunModels + 1; ++r) {
    std::optional<ModelSnapshot> kept = keeper.Find(absl::StrCat("run-", r));
    ASSERT_TRUE(kept.has_value()) << r;
    EXPECT_EQ(kept->round, 2);
    EXPECT_EQ(kept->global_step, 16);
    EXPECT_THAT(*kept->values, ElementsAre(static_cast<float>(r)));
  }
  // Without a state folder nothing is on disk, and the error says what is kept.
  EXPECT_THAT(keeper.LoadKept("run-1").status(),
              StatusIs(absl::StatusCode::kNotFound, "while it runs"));
}

TEST(ModelKeeperTest, HoldersAreTheLiveOnesWithADataPlaneForTheCommittedRoundOnly) {
  ModelKeeper keeper(nullptr);
  keeper.StartRun(RunAt("run-1", 5, 40));
  std::vector<ControlPlane::Leader> live = {Leader("node-a", "10.0.0.1:7000"),
                                            Leader("node-b", ""),  // serves no data plane
                                            Leader("node-d", "10.0.0.4:7000")};  // not a holder
  keeper.SetHolders({"node-a", "node-b", "node-c"}, live);  // node-c is not live
  std::vector<v1::ModelHolder> holders = keeper.Holders("run-1", 5, live);
  ASSERT_EQ(holders.size(), 1u);
  EXPECT_EQ(holders[0].member_id(), "node-a");
  EXPECT_EQ(holders[0].data_address(), "10.0.0.1:7000");
  EXPECT_TRUE(keeper.Holders("run-1", 4, live).empty());  // another round
  keeper.AddHolder(live[2]);                              // it synced for the next round
  keeper.AddHolder(live[0]);                              // once
  holders = keeper.Holders("run-1", 5, live);
  ASSERT_EQ(holders.size(), 2u);
  EXPECT_EQ(holders[1].member_id(), "node-d");
  // node-a joined again (a new credential, so a new data-plane key): the new incarnation
  // holds nothing.
  live[0].data_plane_key = "key of its next join";
  holders = keeper.Holders("run-1", 5, live);
  ASSERT_EQ(holders.size(), 1u);
  EXPECT_EQ(holders[0].member_id(), "node-d");
  EXPECT_TRUE(keeper.Holders("run-0", 5, live).empty());  // another run
  keeper.StartRun(RunAt("run-2"));                        // a new run forgets them
  EXPECT_TRUE(keeper.Holders("run-2", 0, live).empty());
}

}  // namespace
}  // namespace localsgd
