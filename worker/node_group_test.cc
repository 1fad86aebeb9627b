#include "worker/node_group.h"

#include <signal.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/status_matchers.h"

namespace localsgd {
namespace {

using ::localsgd::testing::StatusIs;
using ::testing::ElementsAre;

std::string TestDir(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
}

// Stands in for Gloo where only the group's bookkeeping is under test.
class Fake : public IntraNodeAverager {
 public:
  Fake(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::Status AllReduceMean(at::Tensor&) override { return absl::OkStatus(); }
  absl::Status Broadcast(at::Tensor&) override { return absl::OkStatus(); }

 private:
  const int rank_;
  const int size_;
};

NodeGroup::Factory FakeFactory() {
  return [](const std::string&, int rank, int size)
             -> absl::StatusOr<std::unique_ptr<IntraNodeAverager>> {
    return std::unique_ptr<IntraNodeAverager>(new Fake(rank, size));
  };
}

NodeGroup::Factory GlooFactory() {
  return [](const std::string& store, int rank, int size) {
    return MakeGlooAverager(store, rank, size, absl::Seconds(30));
  };
}

TEST(NodeGroupTest, ARankCannotRunTwice) {
  const std::string dir = TestDir("twice");
  auto first = NodeGroup::Form(dir, 0, 1, absl::Seconds(1), FakeFactory());
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_THAT(NodeGroup::Form(dir, 0, 1, absl::Seconds(1), FakeFactory()),
              StatusIs(absl::StatusCode::kAlreadyExists, "local rank 0 already runs"));
  first->reset();  // the lock goes with the process's hold on it
  EXPECT_TRUE(NodeGroup::Form(dir, 0, 1, absl::Seconds(1), FakeFactory()).ok());
}

TEST(NodeGroupTest, ReformWaitsForLiveRanksAndNamesThoseThatNeverCome) {
  const std::string dir = TestDir("waits");
  auto zero = NodeGroup::Form(dir, 0, 3, absl::Milliseconds(300), FakeFactory());
  auto one = NodeGroup::Form(dir, 1, 3, absl::Milliseconds(300), FakeFactory());
  auto two = NodeGroup::Form(dir, 2, 3, absl::Milliseconds(300), FakeFactory());
  ASSERT_TRUE(zero.ok() && one.ok() && two.ok());
  two->reset();  // rank 2 is gone; rank 1 lives but never re-forms
  EXPECT_THAT((*zero)->Reform(), StatusIs(absl::StatusCode::kDeadlineExceeded,
                                          "local rank(s) 1 neither came nor died"));
}

TEST(NodeGroupTest, SurvivorsRenumberInTheOrderOfTheirLocalRanks) {
  const std::string dir = TestDir("renumber");
  std::vector<std::unique_ptr<NodeGroup>> groups;
  for (int r = 0; r < 4; ++r) {
    auto group = NodeGroup::Form(dir, r, 4, absl::Seconds(10), FakeFactory());
    ASSERT_TRUE(group.ok()) << group.status();
    groups.push_back(*std::move(group));
  }
  groups[1].reset();
  std::vector<std::thread> threads;
  for (int r : {0, 2, 3}) {
    threads.emplace_back([&, r] { ASSERT_TRUE(groups[r]->Reform().ok()); });
  }
  for (auto& t : threads) t.join();
  for (int r : {0, 2, 3}) {
    EXPECT_THAT(groups[r]->members(), ElementsAre(0, 2, 3));
    EXPECT_EQ(groups[r]->generation(), 1);
    EXPECT_EQ(groups[r]->averager().size(), 3);
  }
  EXPECT_EQ(groups[0]->averager().rank(), 0);
  EXPECT_EQ(groups[2]->averager().rank(), 1);
  EXPECT_EQ(groups[3]->averager().rank(), 2);
}

TEST(NodeGroupTest, AloneAfterReformNeedsNoPeers) {
  const std::string dir = TestDir("alone");
  auto zero = NodeGroup::Form(dir, 0, 2, absl::Seconds(1), FakeFactory());
  auto one = NodeGroup::Form(dir, 1, 2, absl::Seconds(1), FakeFactory());
  ASSERT_TRUE(zero.ok() && one.ok());
  one->reset();
  ASSERT_TRUE((*zero)->Reform().ok());
  at::Tensor t = torch::ones({3});
  EXPECT_TRUE((*zero)->averager().AllReduceMean(t).ok());
  EXPECT_EQ((*zero)->averager().size(), 1);
}

// Real processes and Gloo: rank 2 of 3 is SIGKILLed between two all-reduces. The others' next
// collective fails with an error (no crash), they re-form as a group of two and average.
// Each child reports through its exit code: 0 = as expected.
TEST(NodeGroupTest, GlooSurvivorsOfAKilledRankReformAndAverage) {
  const std::string dir = TestDir("gloo");
  constexpr int kRanks = 3;
  std::vector<pid_t> children;
  for (int r = 0; r < kRanks; ++r) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid > 0) {
      children.push_back(pid);
      continue;
    }
    auto group = NodeGroup::Form(dir, r, kRanks, absl::Seconds(30), GlooFactory());
    if (!group.ok()) _exit(10);
    at::Tensor t = torch::full({1000}, static_cast<float>(r + 1));
    if (!(*group)->averager().AllReduceMean(t).ok()) _exit(11);
    if (!torch::allclose(t, torch::full({1000}, 2.0f))) _exit(12);
    if (r == 2) raise(SIGKILL);
    absl::SleepFor(absl::Milliseconds(500));  // rank 2 is dead by now
    t = torch::full({1000}, static_cast<float>(r + 1));
    const absl::Time before = absl::Now();
    if ((*group)->averager().AllReduceMean(t).ok()) _exit(13);
    if (absl::Now() - before > absl::Seconds(10)) _exit(14);  // noticed at once, not at timeout
    if (!(*group)->Reform().ok()) _exit(15);
    if ((*group)->averager().size() != 2 || (*group)->averager().rank() != r) _exit(16);
    t = torch::full({1000}, static_cast<float>(r + 1));
    if (!(*group)->averager().AllReduceMean(t).ok()) _exit(17);
    if (!torch::allclose(t, torch::full({1000}, 1.5f))) _exit(18);
    _exit(0);
  }
  for (int r = 0; r < kRanks; ++r) {
    int status = 0;
    ASSERT_EQ(waitpid(children[r], &status, 0), children[r]);
    if (r == 2) {
      EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    } else {
      EXPECT_TRUE(WIFEXITED(status)) << "rank " << r << " died of signal " << WTERMSIG(status);
      EXPECT_EQ(WEXITSTATUS(status), 0) << "rank " << r;
    }
  }
}

}  // namespace
}  // namespace localsgd
