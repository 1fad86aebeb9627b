#include "worker/hierarchical_averager.h"

#include <torch/types.h>

#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/node_group.h"

namespace localsgd {
namespace {

// Three ranks of one node as threads, averaging with Gloo (no node leader: the node's mean
// is the result). `gone` is destroyed first, as if its process died; the others then call
// Average at the steps given.
struct Outcome {
  absl::Status status;
  absl::Status health;
  int64_t step = 0;
  at::Tensor tensor;
};

std::vector<Outcome> AverageAfterADeath(const std::string& name, int gone,
                                        const std::vector<int64_t>& steps) {
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  std::vector<std::unique_ptr<NodeGroup>> groups(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      auto group =
          NodeGroup::Form(dir, r, 3, absl::Seconds(20),
                          [](const std::string& store, int rank, int size, std::function<bool()>) {
                            return MakeGlooAverager(store, rank, size, absl::Seconds(20));
                          });
      if (group.ok()) groups[r] = *std::move(group);
    });
  }
  for (auto& t : threads) t.join();
  threads.clear();
  std::vector<Outcome> outcomes(3);
  for (int r = 0; r < 3; ++r) {
    if (!groups[r]) {
      outcomes[r].status = absl::InternalError("did not form");
      return outcomes;
    }
  }
  groups[gone].reset();
  for (int r = 0; r < 3; ++r) {
    if (r == gone) continue;
    threads.emplace_back([&, r] {
      HierarchicalAverager averager(groups[r].get(), /*leader=*/nullptr, /*take_lead=*/nullptr);
      at::Tensor t = torch::full({1000}, static_cast<float>(r + 1));
      Outcome& out = outcomes[r];
      out.step = steps[r];
      out.status = averager.Average({t}, /*fragment=*/0, &out.step);
      out.health = averager.Health();
      out.tensor = t;
    });
  }
  for (auto& t : threads) t.join();
  return outcomes;
}

TEST(HierarchicalAveragerTest, TheRanksLeftRedoTheRoundAtTheLeadersStep) {
  // Rank 2 is one sync ahead (it passed the last broadcast that the others failed): it goes
  // back to the leader's step.
  std::vector<Outcome> out = AverageAfterADeath("redo", /*gone=*/1, {8, 0, 12});
  for (int r : {0, 2}) {
    ASSERT_TRUE(out[r].status.ok()) << r << ": " << out[r].status;
    EXPECT_TRUE(out[r].health.ok());
    EXPECT_EQ(out[r].step, 8) << r;
    EXPECT_TRUE(torch::allclose(out[r].tensor, torch::full({1000}, 2.0f))) << r;  // (1 + 3) / 2
  }
}

TEST(HierarchicalAveragerTest, ADeadLeaderStopsTheOthers) {
  std::vector<Outcome> out = AverageAfterADeath("leader", /*gone=*/0, {8, 8, 8});
  for (int r : {1, 2}) {
    EXPECT_EQ(out[r].status.code(), absl::StatusCode::kFailedPrecondition) << out[r].status;
    EXPECT_NE(out[r].health.message().find("node leader (local rank 0) died"), std::string::npos)
        << out[r].health;
  }
}

}  // namespace
}  // namespace localsgd
