#include "worker/intra_node_averager.h"

#include <torch/types.h>

#include <cstdlib>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace localsgd {
namespace {

TEST(IntraNodeAveragerTest, SingleRankChangesNothing) {
  auto averager = MakeSingleRankAverager();
  at::Tensor t = torch::ones({4});
  ASSERT_TRUE(averager->AllReduceMean(t).ok());
  ASSERT_TRUE(averager->Broadcast(t).ok());
  EXPECT_TRUE(torch::equal(t, torch::ones({4})));
}

TEST(IntraNodeAveragerTest, GlooAveragesAndBroadcastsAcrossRanks) {
  const int kRanks = 3;
  const std::string store = absl::StrCat(std::getenv("TEST_TMPDIR"), "/gloo.store");
  std::vector<at::Tensor> means(kRanks), broadcasts(kRanks);
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&, r] {
      auto averager = MakeGlooAverager(store, r, kRanks, absl::Seconds(30));
      ASSERT_TRUE(averager.ok()) << averager.status();
      at::Tensor t = torch::full({1000}, static_cast<float>(r + 1));
      ASSERT_TRUE((*averager)->AllReduceMean(t).ok());
      means[r] = t.clone();
      at::Tensor b = torch::full({10}, static_cast<float>(10 * r));
      ASSERT_TRUE((*averager)->Broadcast(b).ok());
      broadcasts[r] = b;
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_TRUE(torch::allclose(means[r], torch::full({1000}, 2.0f))) << r;
    EXPECT_TRUE(torch::equal(broadcasts[r], torch::zeros({10}))) << r;
  }
}

// Ranks out of step (one all-reduces while another broadcasts, of another size) fail
// UNAVAILABLE, and can go on together once back in step, where Gloo used to abort the process.
TEST(IntraNodeAveragerTest, GlooRanksAtDifferentCollectivesFailInsteadOfAborting) {
  const std::string store = absl::StrCat(std::getenv("TEST_TMPDIR"), "/gloo-apart.store");
  std::vector<absl::Status> apart(2);
  std::vector<at::Tensor> after(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      auto averager = MakeGlooAverager(store, r, 2, absl::Seconds(30));
      ASSERT_TRUE(averager.ok()) << averager.status();
      at::Tensor t = torch::full({r == 0 ? 1000 : 1200}, 1.0f);
      apart[r] = r == 0 ? (*averager)->AllReduceMean(t) : (*averager)->Broadcast(t);
      at::Tensor together = torch::full({100}, static_cast<float>(2 * r));
      ASSERT_TRUE((*averager)->AllReduceMean(together).ok());
      after[r] = together;
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(absl::IsUnavailable(apart[r])) << apart[r];
    EXPECT_NE(apart[r].message().find("different collectives"), std::string::npos) << apart[r];
    EXPECT_TRUE(torch::allclose(after[r], torch::full({100}, 1.0f))) << r;
  }
}

}  // namespace
}  // namespace localsgd
