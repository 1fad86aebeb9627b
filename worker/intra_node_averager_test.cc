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

}  // namespace
}  // namespace localsgd
