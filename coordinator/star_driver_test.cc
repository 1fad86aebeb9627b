// StarDriver against a fake RoundContext and fake member streams: the header each member gets,
// the averaged update chunks it is sent, the commit, and a member that sends what the round
// cannot take.
#include "coordinator/star_driver.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/fake_round_context.h"
#include "exchange/codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace localsgd {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kValues = 4096;  // FakeRoundContext's layout: 16 chunks of 256

class StarDriverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RangeReducer::Options options;
    options.layout = context_.round().layout;
    reducer_ = std::make_shared<RangeReducer>(options, std::vector<float>(kValues, 1.0f));
    context_.set_reducer(reducer_);
    std::vector<ControlPlane::Leader> live;
    for (const std::string& id : {"node-0/0", "node-1/0"}) {
      live.push_back({id, 1, 1, "", "key"});
    }
    driver_ = std::make_unique<StarDriver>(&context_, live);
    for (const std::string& id : {"node-0/0", "node-1/0"}) {
      streams_[id] = std::make_shared<FakeStream>();
      absl::StatusOr<int64_t> session = driver_->Arrive(HeaderOf(id), streams_[id]);
      ASSERT_TRUE(session.ok()) << session.status();
      sessions_[id] = *session;
    }
  }
  // Member `id`'s chunk `c` of a delta of `value` everywhere, checked as the service does.
  absl::Status Send(const std::string& id, int c, float value, int64_t size = 256) {
    v1::Chunk chunk;
    chunk.set_index(c);
    Encode(v1::CODEC_FP32, std::vector<float>(static_cast<size_t>(size), value),
           chunk.mutable_data());
    std::vector<float> decoded;
    absl::Status checked = reducer_->deltas().Check(c, chunk.data(), &decoded);
    return driver_->AddChunk(sessions_[id], chunk, checked, decoded);
  }

  FakeRoundContext context_;
  std::shared_ptr<RangeReducer> reducer_;
  std::unique_ptr<StarDriver> driver_;
  std::map<std::string, std::shared_ptr<FakeStream>> streams_;
  std::map<std::string, int64_t> sessions_;
};

TEST_F(StarDriverTest, EveryMemberGetsTheUpdateChunksAndTheRoundCommitsTheMean) {
  EXPECT_EQ(streams_["node-0/0"]->sent.front().header().num_chunks(), 16);
  EXPECT_THAT(streams_["node-1/0"]->sent.front().header().members(),
              ElementsAre("node-0/0", "node-1/0"));
  for (int c = 0; c < 16; ++c) {
    ASSERT_TRUE(Send("node-0/0", c, 0.5f).ok());
    ASSERT_TRUE(Send("node-1/0", c, 1.5f).ok());
    driver_->Advance();  // chunk c is averaged and sent at once
    ASSERT_EQ(streams_["node-0/0"]->sent.size(), static_cast<size_t>(c + 2));
    if (c < 15) EXPECT_TRUE(context_.committed.empty());
  }
  const v1::SyncResponse& update = streams_["node-1/0"]->sent.back();
  ASSERT_TRUE(update.has_update());
  EXPECT_EQ(update.update().index(), 15);
  std::vector<float> values(256);
  ASSERT_TRUE(Decode(v1::CODEC_FP32, update.update().data(), absl::MakeSpan(values)).ok());
  EXPECT_EQ(values[0], 1.0f);  // the mean delta (plain averaging: lr 1)
  // Every member delivered every chunk: the last Advance committed (the round manager then
  // ends the driver with the round).
  EXPECT_THAT(context_.committed, ElementsAre("node-0/0", "node-1/0"));
  EXPECT_EQ(context_.committed_at, 16);
  EXPECT_EQ(reducer_->global()[kValues - 1], 2.0f);  // 1 + the mean delta
}

TEST_F(StarDriverTest, AChunkOfTheWrongSizeDropsItsMemberNamingTheChunk) {
  const absl::Status refused = Send("node-1/0", 3, 0.5f, /*size=*/100);
  EXPECT_TRUE(absl::IsInvalidArgument(refused)) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("chunk 3"));
  ASSERT_TRUE(streams_["node-1/0"]->closed.has_value());
  EXPECT_TRUE(absl::IsInvalidArgument(*streams_["node-1/0"]->closed));
  for (int c = 0; c < 16; ++c) ASSERT_TRUE(Send("node-0/0", c, 0.5f).ok());
  driver_->EndOfInput(sessions_["node-0/0"]);
  driver_->Advance();
  // One of min_workers 2 left: the round does not commit.
  EXPECT_TRUE(context_.committed.empty());
}

}  // namespace
}  // namespace localsgd
