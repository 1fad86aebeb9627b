// ShardedDriver against a fake RoundContext and fake member streams: what it sends each member
// (the layout, drop notices, StaleRound) and what it asks the context to do (commit, abort).
#include "coordinator/sharded_driver.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/fake_round_context.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace localsgd {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class ShardedDriverTest : public ::testing::Test {
 protected:
  void Open(int leaders) {
    std::vector<ControlPlane::Leader> live;
    for (int i = 0; i < leaders; ++i) {
      const std::string id = "node-" + std::to_string(i) + "/0";
      live.push_back({id, 1, 1, "10.0.0." + std::to_string(i) + ":7000", "key-" + id});
      ids_.push_back(id);
    }
    driver_ = std::make_unique<ShardedDriver>(&context_, live);
    for (const std::string& id : ids_) {
      streams_[id] = std::make_shared<FakeStream>();
      absl::StatusOr<int64_t> session = driver_->Arrive(HeaderOf(id), streams_[id]);
      ASSERT_TRUE(session.ok()) << session.status();
      sessions_[id] = *session;
    }
    driver_->Advance();  // every member arrived: the layout goes out
  }
  // The layout member `id` was sent.
  const v1::RoundHeader& Layout(const std::string& id) {
    EXPECT_FALSE(streams_[id]->sent.empty());
    EXPECT_TRUE(streams_[id]->sent.front().has_header());
    return streams_[id]->sent.front().header();
  }
  // Member `id` holds every range, the digest of range s being `digest + s`.
  absl::Status Deliver(const std::string& id, uint64_t digest) {
    v1::Delivered delivered;
    for (int s = 0; s < Layout(id).shards_size(); ++s) {
      delivered.add_range_digests(digest + s);
      delivered.add_value_digests(digest + 100 + s);
    }
    return driver_->Deliver(sessions_[id], delivered);
  }

  FakeRoundContext context_;
  std::unique_ptr<ShardedDriver> driver_;
  std::vector<std::string> ids_;
  std::map<std::string, std::shared_ptr<FakeStream>> streams_;
  std::map<std::string, int64_t> sessions_;
};

TEST_F(ShardedDriverTest, EveryMemberGetsTheLayoutAndTheRoundCommitsOnAgreedDigests) {
  Open(3);
  const v1::RoundHeader& layout = Layout("node-0/0");
  EXPECT_EQ(layout.round(), 4);
  EXPECT_EQ(layout.members_size(), 3);
  EXPECT_GE(layout.shards_size(), 1);
  EXPECT_EQ(layout.num_chunks(), 16);
  EXPECT_EQ(Layout("node-2/0").shards_size(), layout.shards_size());
  for (const std::string& id : ids_) ASSERT_TRUE(Deliver(id, 7000).ok());
  driver_->Advance();
  EXPECT_THAT(context_.committed, ElementsAre("node-0/0", "node-1/0", "node-2/0"));
  EXPECT_EQ(context_.committed_at, 16);
  DigestPair whole;
  for (int s = 0; s < layout.shards_size(); ++s) {
    whole = RangeDigests::Combine(whole, {7000u + s, 7100u + s});
  }
  EXPECT_EQ(context_.committed_digest, whole);
  EXPECT_TRUE(context_.aborted.empty());
}

TEST_F(ShardedDriverTest, AMemberWhoseCopyDiffersIsToldToFetchAndTheRoundAborts) {
  Open(3);
  ASSERT_TRUE(Deliver("node-0/0", 7000).ok());
  ASSERT_TRUE(Deliver("node-1/0", 7000).ok());
  ASSERT_TRUE(Deliver("node-2/0", 9000).ok());  // outvoted on every range
  driver_->Advance();
  EXPECT_TRUE(context_.committed.empty());
  EXPECT_THAT(context_.aborted, HasSubstr("node-2/0"));
  const std::vector<v1::SyncResponse>& sent = streams_["node-2/0"]->sent;
  ASSERT_TRUE(sent.back().has_stale());
  EXPECT_EQ(sent.back().stale().committed_round(), 3);
  ASSERT_TRUE(streams_["node-2/0"]->closed.has_value());
  EXPECT_TRUE(absl::IsFailedPrecondition(*streams_["node-2/0"]->closed));
}

// Every member owns a range here: one whose stream ends before its delivery leaves a range
// nobody will average, and the round aborts at once, naming it, rather than at its deadline.
TEST_F(ShardedDriverTest, AnOwnerWhoseStreamEndsBeforeItsDeliveryAbortsTheRoundAtOnce) {
  Open(3);
  ASSERT_EQ(Layout("node-0/0").shards_size(), 3);
  driver_->EndOfInput(sessions_["node-2/0"]);
  ASSERT_TRUE(streams_["node-2/0"]->closed.has_value());
  EXPECT_THAT(streams_["node-2/0"]->closed->message(), HasSubstr("before it held the whole"));
  driver_->Advance();
  EXPECT_THAT(context_.aborted, HasSubstr("node-2/0"));
  EXPECT_TRUE(context_.committed.empty());
}

TEST_F(ShardedDriverTest, ADeliveryWithMismatchedDigestListsIsRefusedNamingTheField) {
  Open(2);
  v1::Delivered delivered;
  delivered.add_range_digests(1);
  const absl::Status status = driver_->Deliver(sessions_["node-1/0"], delivered);
  EXPECT_TRUE(absl::IsInvalidArgument(status));
  EXPECT_THAT(status.message(), HasSubstr("delivered.value_digests"));
  ASSERT_TRUE(streams_["node-1/0"]->closed.has_value());
}

}  // namespace
}  // namespace localsgd
