#include "worker/node_group.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <torch/types.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/status_matchers.h"
#include "tests/testutil/wait_for.h"

namespace localsgd {
namespace {

using ::localsgd::testing::StatusIs;
using ::testing::ElementsAre;

// True when no process holds the flock(2) on `path` (its holder died).
bool LockFree(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return false;
  const bool free = flock(fd, LOCK_SH | LOCK_NB) == 0;
  close(fd);  // drops the shared lock, if taken
  return free;
}

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
  return [](const std::string&, int rank, int size,
            std::function<bool()>) -> absl::StatusOr<std::unique_ptr<IntraNodeAverager>> {
    return std::unique_ptr<IntraNodeAverager>(new Fake(rank, size));
  };
}

NodeGroup::Factory GlooFactory() {
  return [](const std::string& store, int rank, int size, std::function<bool()>) {
    return MakeGlooAverager(store, rank, size, absl::Seconds(30));
  };
}

// Local ranks 0..n-1 of one node, formed together (each waits for the others) with the fake
// averager; empty when one failed.
std::vector<std::unique_ptr<NodeGroup>> FormAll(const std::string& dir, int n,
                                                absl::Duration timeout) {
  std::vector<std::unique_ptr<NodeGroup>> groups(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto group = NodeGroup::Form(dir, r, n, timeout, FakeFactory());
      EXPECT_TRUE(group.ok()) << group.status();
      if (group.ok()) groups[r] = *std::move(group);
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& group : groups) {
    if (group == nullptr) return {};
  }
  return groups;
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

TEST(NodeGroupTest, ARankWaitingForRankZeroStopsWhenToldTo) {
  const std::string dir = TestDir("give-up");
  // The run ends while the rank waits: the third time it asks.
  int asked = 0;
  const absl::Time start = absl::Now();
  EXPECT_THAT(
      NodeGroup::Form(dir, 1, 2, absl::Seconds(30), FakeFactory(), [&] { return ++asked >= 3; }),
      StatusIs(absl::StatusCode::kCancelled, "stopped waiting for local rank 0"));
  EXPECT_EQ(asked, 3);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));  // not the 30 s timeout
}

// Rank 0 of a node whose rank 1 never starts (it joined the coordinator only after the run
// was stopped, say): rank 0 stops waiting for it when told to, not at the timeout, since the
// collectives' rendezvous that would follow cannot be interrupted; and names it at the timeout.
TEST(NodeGroupTest, ARankWaitingForTheOthersStopsWhenToldToAndNamesThemAtTheTimeout) {
  int asked = 0;
  const absl::Time start = absl::Now();
  EXPECT_THAT(NodeGroup::Form(TestDir("others"), 0, 3, absl::Seconds(30), FakeFactory(),
                              [&] { return ++asked >= 3; }),
              StatusIs(absl::StatusCode::kCancelled, "stopped waiting for local rank(s) 1, 2"));
  EXPECT_EQ(asked, 3);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));  // not the 30 s timeout
  EXPECT_THAT(
      NodeGroup::Form(TestDir("others-timeout"), 0, 2, absl::Milliseconds(200), FakeFactory()),
      StatusIs(absl::StatusCode::kDeadlineExceeded,
               "local rank(s) 1 of this node did not start within 200ms"));
}

TEST(NodeGroupTest, ReformWaitsForLiveRanksAndNamesThoseThatNeverCome) {
  std::vector<std::unique_ptr<NodeGroup>> groups =
      FormAll(TestDir("waits"), 3, absl::Milliseconds(300));
  ASSERT_EQ(groups.size(), 3u);
  groups[2].reset();  // rank 2 is gone; rank 1 lives but never re-forms
  EXPECT_THAT(groups[0]->Reform(), StatusIs(absl::StatusCode::kDeadlineExceeded,
                                            "local rank(s) 1 neither came nor died"));
}

TEST(NodeGroupTest, SurvivorsRenumberInTheOrderOfTheirLocalRanks) {
  std::vector<std::unique_ptr<NodeGroup>> groups =
      FormAll(TestDir("renumber"), 4, absl::Seconds(10));
  ASSERT_EQ(groups.size(), 4u);
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

// A rank killed and started again alone cannot join the group its node's other ranks train on
// in: it says so (and leaves that group's files alone); the whole node started again forms.
TEST(NodeGroupTest, ARankStartedAgainAloneIsRefusedAndTheWholeNodeForms) {
  const std::string dir = TestDir("again");
  std::vector<std::unique_ptr<NodeGroup>> groups = FormAll(dir, 3, absl::Seconds(1));
  ASSERT_EQ(groups.size(), 3u);
  for (int again : {0, 1}) {
    groups[again].reset();
    EXPECT_THAT(NodeGroup::Form(dir, again, 3, absl::Seconds(1), FakeFactory()),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         again == 0 ? "local rank(s) 1, 2 of this node train on in a group without "
                                      "local rank 0"
                                    : "local rank(s) 2 of this node train on"));
  }
  groups.clear();
  EXPECT_EQ(FormAll(dir, 3, absl::Seconds(1)).size(), 3u);
}

// A rank of a new start holds its liveness lock a moment before its mark is in alive.<rank>
// (it writes the mark under the folder's lock); a rank started meanwhile must not take it for
// one of the earlier start that trains on.
TEST(NodeGroupTest, ARankOfANewStartIsNotTakenForOneThatTrainsOn) {
  const std::string dir = TestDir("newstart");
  ASSERT_EQ(FormAll(dir, 2, absl::Seconds(1)).size(), 2u);  // then both gone; their files stay
  // A new rank 1, between taking its liveness lock and writing its mark.
  const int dir_fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_EQ(flock(dir_fd, LOCK_EX), 0);
  const int alive = open(absl::StrCat(dir, "/alive.1").c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_EQ(flock(alive, LOCK_EX), 0);
  std::thread marks([&] {
    absl::SleepFor(absl::Milliseconds(200));
    EXPECT_EQ(ftruncate(alive, 0), 0);
    EXPECT_EQ(pwrite(alive, "new", 3, 0), 3);
    close(dir_fd);
  });
  auto rank0 = NodeGroup::Form(dir, 0, 2, absl::Seconds(1), FakeFactory());
  marks.join();
  EXPECT_TRUE(rank0.ok()) << rank0.status();
  close(alive);
}

TEST(NodeGroupTest, AloneAfterReformNeedsNoPeers) {
  std::vector<std::unique_ptr<NodeGroup>> groups = FormAll(TestDir("alone"), 2, absl::Seconds(1));
  ASSERT_EQ(groups.size(), 2u);
  groups[1].reset();
  ASSERT_TRUE(groups[0]->Reform().ok());
  at::Tensor t = torch::ones({3});
  EXPECT_TRUE(groups[0]->averager().AllReduceMean(t).ok());
  EXPECT_EQ(groups[0]->averager().size(), 1);
}

// A node whose ranks were all killed and restarted: rank 0 clears the earlier incarnation's
// files, so a stale arrival mark cannot pass for a live rank.
TEST(NodeGroupTest, FilesOfAnEarlierIncarnationAreNotRead) {
  const std::string dir = TestDir("incarnation");
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  for (const char* name : {"g1.rank1", "incarnation", "alive.0"}) {
    std::ofstream(absl::StrCat(dir, "/", name)) << "12345";
  }
  std::vector<std::unique_ptr<NodeGroup>> groups(3);
  std::vector<std::thread> threads;
  for (int r : {2, 1, 0}) {  // the others wait for rank 0's incarnation
    threads.emplace_back([&, r] {
      auto group = NodeGroup::Form(dir, r, 3, absl::Seconds(10), FakeFactory());
      ASSERT_TRUE(group.ok()) << group.status();
      groups[r] = *std::move(group);
    });
  }
  for (auto& t : threads) t.join();
  threads.clear();
  ASSERT_TRUE(groups[0] && groups[1] && groups[2]);
  groups[1].reset();
  for (int r : {0, 2}) {
    threads.emplace_back([&, r] { ASSERT_TRUE(groups[r]->Reform().ok()); });
  }
  for (auto& t : threads) t.join();
  EXPECT_THAT(groups[0]->members(), ElementsAre(0, 2));
}

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// The end of a run: the node's folder goes with the last rank to leave, however many left
// before it (or died: a rank gone without being told leaves its lock free too).
TEST(NodeGroupTest, TheLastRankToLeaveAnEndedRunRemovesTheFolder) {
  const std::string dir = TestDir("ended");
  std::vector<std::unique_ptr<NodeGroup>> groups = FormAll(dir, 3, absl::Seconds(10));
  ASSERT_EQ(groups.size(), 3u);
  groups[0].reset();  // as if it had died
  for (auto& group : groups) {
    if (group != nullptr) group->RemoveFolderOnLeaving();
  }
  groups[2].reset();
  EXPECT_TRUE(Exists(absl::StrCat(dir, "/alive.1")));
  groups[1].reset();
  EXPECT_FALSE(Exists(dir));
}

// Ranks leaving at the same moment take turns: none of them sees the others as still there
// once they are gone, so the folder never stays behind.
TEST(NodeGroupTest, RanksLeavingTogetherRemoveTheFolder) {
  for (int attempt = 0; attempt < 20; ++attempt) {
    const std::string dir = TestDir(absl::StrCat("together", attempt));
    std::vector<std::unique_ptr<NodeGroup>> groups = FormAll(dir, 4, absl::Seconds(10));
    ASSERT_EQ(groups.size(), 4u);
    std::vector<std::thread> threads;
    for (auto& group : groups) {
      group->RemoveFolderOnLeaving();
      threads.emplace_back([&group] { group.reset(); });
    }
    for (auto& t : threads) t.join();
    EXPECT_FALSE(Exists(dir)) << "attempt " << attempt;
  }
}

// A rank that never formed a group (its run ended while it waited for the others) removes
// the folder only once no rank holds a lock there; a folder already gone is no error.
TEST(NodeGroupTest, ARankWithoutAGroupRemovesTheFolderOnlyWhenNoRankIsThere) {
  const std::string dir = TestDir("no-group");
  std::vector<std::unique_ptr<NodeGroup>> groups = FormAll(dir, 2, absl::Seconds(10));
  ASSERT_EQ(groups.size(), 2u);
  groups[0].reset();
  NodeGroup::RemoveFolderIfUnused(dir);
  EXPECT_TRUE(Exists(absl::StrCat(dir, "/alive.1")));  // rank 1 is still there
  groups[1].reset();
  NodeGroup::RemoveFolderIfUnused(dir);
  EXPECT_FALSE(Exists(dir));
  NodeGroup::RemoveFolderIfUnused(dir);
}

// The folders of ended runs whose last ranks were all killed (none was left to remove them):
// a rank of the same node joining another run removes them, but not a folder where a rank
// still lives, its own run's, another node's, or a folder that is not a node folder.
TEST(NodeGroupTest, UnusedFoldersOfOtherRunsAreRemoved) {
  const std::string parent = TestDir("sweep");
  const auto folder = [&parent](const std::string& run, const std::string& node) {
    return absl::StrCat(parent, "/localsgd-", run, "-", node);
  };
  for (const auto& [run, node] :
       {std::pair<std::string, std::string>{"a", "n"}, {"c", "n"}, {"a", "other"}}) {
    ASSERT_EQ(FormAll(folder(run, node), 2, absl::Seconds(10)).size(), 2u);  // left, as if killed
  }
  auto live = NodeGroup::Form(folder("b", "n"), 0, 1, absl::Seconds(10), FakeFactory());
  ASSERT_TRUE(live.ok()) << live.status();
  ASSERT_TRUE(MakeDirectories(folder("d", "n")).ok());
  std::ofstream(absl::StrCat(folder("d", "n"), "/data")) << "not a node folder";

  NodeGroup::RemoveUnusedFolders(parent, "localsgd-", "-n", "localsgd-c-n");
  EXPECT_FALSE(Exists(folder("a", "n")));
  EXPECT_TRUE(Exists(absl::StrCat(folder("b", "n"), "/alive.0")));
  EXPECT_TRUE(Exists(absl::StrCat(folder("c", "n"), "/incarnation")));
  EXPECT_TRUE(Exists(absl::StrCat(folder("a", "other"), "/incarnation")));
  EXPECT_TRUE(Exists(absl::StrCat(folder("d", "n"), "/data")));
}

// A rank joining a folder while another removes it as unused (it holds no lock yet) ends up
// holding its lock in a folder that exists: it never keeps a lock on a removed file.
TEST(NodeGroupTest, ARankJoiningWhileItsFolderIsRemovedKeepsAFolder) {
  for (int attempt = 0; attempt < 20; ++attempt) {
    const std::string dir = TestDir(absl::StrCat("joining", attempt));
    ASSERT_EQ(FormAll(dir, 1, absl::Seconds(10)).size(), 1u);  // an unused folder
    std::atomic<bool> formed{false};
    std::thread remover([&] {
      while (!formed) NodeGroup::RemoveFolderIfUnused(dir);
    });
    auto group = NodeGroup::Form(dir, 0, 1, absl::Seconds(10), FakeFactory());
    formed = true;
    remover.join();
    ASSERT_TRUE(group.ok()) << group.status();
    EXPECT_FALSE(LockFree(absl::StrCat(dir, "/alive.0"))) << "attempt " << attempt;
    EXPECT_TRUE(Exists(absl::StrCat(dir, "/incarnation"))) << "attempt " << attempt;
  }
}

// A run that goes on keeps the folder: a rank may be started again and rejoin there.
TEST(NodeGroupTest, RanksLeavingARunThatGoesOnKeepTheFolder) {
  const std::string dir = TestDir("kept");
  std::vector<std::unique_ptr<NodeGroup>> groups = FormAll(dir, 2, absl::Seconds(10));
  ASSERT_EQ(groups.size(), 2u);
  groups.clear();
  EXPECT_TRUE(Exists(absl::StrCat(dir, "/incarnation")));
}

// Runs body(rank) in `ranks` forked processes; returns their wait statuses.
std::vector<int> RunRanks(int ranks, const std::function<int(int)>& body) {
  std::vector<pid_t> children;
  for (int r = 0; r < ranks; ++r) {
    const pid_t pid = fork();
    if (pid == 0) _exit(body(r));
    children.push_back(pid);
  }
  std::vector<int> statuses;
  for (pid_t pid : children) {
    int status = -1;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) status = -1;
    statuses.push_back(status);
  }
  return statuses;
}

bool ExitedWith(int status, int code) { return WIFEXITED(status) && WEXITSTATUS(status) == code; }

// Real processes and Gloo: rank 2 of 3 is SIGKILLed between two all-reduces. The others' next
// collective fails with an error (no crash), they re-form as a group of two and average. They
// end without cleaning up (_exit), and a new incarnation of three ranks then forms in the same
// folder. Each rank reports through its exit code: 0 = as expected.
TEST(NodeGroupTest, GlooSurvivorsOfAKilledRankReformAndAverage) {
  const std::string dir = TestDir("gloo");
  std::vector<int> statuses = RunRanks(3, [&](int r) {
    auto group = NodeGroup::Form(dir, r, 3, absl::Seconds(30), GlooFactory());
    if (!group.ok()) return 10;
    at::Tensor t = torch::full({1000}, static_cast<float>(r + 1));
    if (!(*group)->averager().AllReduceMean(t).ok()) return 11;
    if (!torch::allclose(t, torch::full({1000}, 2.0f))) return 12;
    if (r == 2) raise(SIGKILL);
    // Rank 2 is dead once its alive.2 lock is free. Then Gloo's connections must have seen
    // its sockets close before the next collective, or a survivor's half of a ring can still
    // complete: nothing observable says when they have, so this one wait is a fixed time
    // (the only one left in the tests).
    if (!WaitFor([&] { return LockFree(absl::StrCat(dir, "/alive.2")); }, absl::Seconds(10))) {
      return 17;
    }
    absl::SleepFor(absl::Milliseconds(500));
    t = torch::full({1000}, static_cast<float>(r + 1));
    const absl::Time before = absl::Now();
    if ((*group)->averager().AllReduceMean(t).ok()) return 13;
    if (absl::Now() - before > absl::Seconds(10)) return 14;  // noticed at once, not at timeout
    if (!(*group)->Reform().ok()) return 15;
    if ((*group)->averager().size() != 2 || (*group)->averager().rank() != r) return 16;
    t = torch::full({1000}, static_cast<float>(r + 1));
    if (!(*group)->averager().AllReduceMean(t).ok()) return 17;
    if (!torch::allclose(t, torch::full({1000}, 1.5f))) return 18;
    return 0;
  });
  EXPECT_TRUE(ExitedWith(statuses[0], 0)) << statuses[0];
  EXPECT_TRUE(ExitedWith(statuses[1], 0)) << statuses[1];
  EXPECT_TRUE(WIFSIGNALED(statuses[2]) && WTERMSIG(statuses[2]) == SIGKILL) << statuses[2];

  statuses = RunRanks(3, [&](int r) {
    auto group = NodeGroup::Form(dir, r, 3, absl::Seconds(30), GlooFactory());
    if (!group.ok()) return 20;
    at::Tensor t = torch::full({10}, static_cast<float>(r));
    if (!(*group)->averager().AllReduceMean(t).ok()) return 21;
    return torch::allclose(t, torch::full({10}, 1.0f)) ? 0 : 22;
  });
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(ExitedWith(statuses[r], 0)) << r << ": " << statuses[r];
}

}  // namespace
}  // namespace localsgd
