#include "exchange/ring_member.h"

#include <grpcpp/create_channel.h>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/auth.h"
#include "common/data_plane_tag.h"
#include "common/grpc_channel.h"
#include "common/mutex.h"
#include "exchange/codec.h"
#include "exchange/data_plane_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace localsgd {
namespace {

constexpr char kToken[] = "ring-token";
constexpr int64_t kChunkValues = 100;

// One member's received means, decoded, by chunk.
struct Received {
  Mutex mu;
  std::map<int, std::vector<float>> chunks ABSL_GUARDED_BY(mu);
  std::vector<std::string> unreachable ABSL_GUARDED_BY(mu);
};

// Members over real data planes on loopback, weights 1, 2, 3, ...; `bounds` gives each one's
// range (member i owns chunks [bounds[i], bounds[i + 1])); the test plays the coordinator.
// By default three members and 7 chunks, ranges of 2, 2 and 3.
class RingMemberTest : public ::testing::Test {
 protected:
  void SetUp() override { Lay({0, 2, 4, 7}, 7 * kChunkValues - 30); }

  void Lay(const std::vector<int>& bounds, int64_t num_values) {
    members_ = static_cast<int>(bounds.size()) - 1;
    layout_ = ChunkLayout{num_values, kChunkValues};
    ASSERT_EQ(layout_.num_chunks(), bounds.back());
    servers_.clear();
    params_.clear();
    received_.clear();
    header_ = v1::RoundHeader();
    header_.set_round(5);
    header_.set_attempt(2);
    header_.set_codec(v1::CODEC_FP32);
    header_.set_ring(true);
    header_.set_num_chunks(layout_.num_chunks());
    header_.set_chunk_values(kChunkValues);
    for (int i = 0; i < members_; ++i) {
      DataPlaneServer::Options options;
      options.token = kToken;
      options.identity = [i] {
        return StreamTagCheck::Identity{absl::StrCat("m", i), absl::StrCat("credential-", i)};
      };
      auto server = DataPlaneServer::Start(options);
      ASSERT_TRUE(server.ok()) << server.status();
      servers_.push_back(*std::move(server));
      header_.add_members(absl::StrCat("m", i));
      header_.add_weights(i + 1);
      v1::ShardRange* shard = header_.add_shards();
      shard->set_owner_id(absl::StrCat("m", i));
      shard->set_address(servers_.back()->address());
      shard->set_begin_chunk(bounds[i]);
      shard->set_end_chunk(bounds[i + 1]);
      params_.emplace_back(static_cast<size_t>(layout_.num_values));
      for (int64_t v = 0; v < layout_.num_values; ++v) {
        params_.back()[v] = 0.001f * static_cast<float>((v * (i + 3)) % 997) - 0.4f;
      }
      received_.push_back(std::make_unique<Received>());
    }
    global_.assign(static_cast<size_t>(layout_.num_values), 0.25f);
  }

  // `wait_for_ready`: the member's streams wait for their connection rather than fail when
  // one attempt to connect fails. These tests are about the ring's data; on this busy machine
  // one connection in a few hundred failed its first attempt (the round would abort, which
  // ANeighbourThatIsGoneIsNamedAndStopEndsTheRound covers, with streams that do not wait).
  std::unique_ptr<RingMember> Start(int i, bool wait_for_ready = true) {
    servers_[i]->inbox()->Follow("run", 5, 2, absl::StrCat("m", (i + members_ - 1) % members_));
    RingMember::Setup setup;
    setup.header = &header_;
    setup.pass_header.set_run_id("run");
    setup.pass_header.set_round(5);
    setup.pass_header.set_attempt(2);
    setup.pass_header.set_member_id(absl::StrCat("m", i));
    // The tag the coordinator makes for m<i>'s stream to its successor, under the successor's
    // key.
    const int succ = (i + 1) % members_;
    setup.pass_header.set_member_tag(
        DataPlaneTag(DataPlaneKey(absl::StrCat("credential-", succ)),
                     DataPlaneStream{"run", 5, 2, absl::StrCat("m", i), absl::StrCat("m", succ)}));
    setup.layout = &layout_;
    setup.self = i;
    setup.params = params_[i];
    setup.global = global_;
    for (int stripe = 0; stripe < stripes_; ++stripe) {
      setup.succ_channels.push_back(CreateStreamingChannel(
          servers_[(i + 1) % members_]->address(), grpc::InsecureChannelCredentials(), stripe));
      setup.contexts.push_back(AuthorizedContext(kToken, absl::Seconds(30)));
      setup.contexts.back()->set_wait_for_ready(wait_for_ready);
    }
    setup.inbox = servers_[i]->inbox();
    Received* received = received_[i].get();
    setup.take_mean = [this, received](int, const ReceivedChunk& mean) {
      std::vector<float> values(static_cast<size_t>(layout_.size(mean.index())));
      absl::Status status = mean.Decode(header_.codec(), absl::MakeSpan(values));
      MutexLock lock(&received->mu);
      received->chunks[mean.index()] = std::move(values);
      return status;
    };
    setup.unreachable = [received](const std::string& id, const absl::Status&) {
      MutexLock lock(&received->mu);
      received->unreachable.push_back(id);
    };
    return std::make_unique<RingMember>(std::move(setup));
  }

  // Runs a whole round over every member; checks every member got the weighted mean of every
  // chunk (within `tolerance`), bit for bit the same.
  void RunRound(double tolerance = 1e-6);

  int members_ = 0;
  int stripes_ = 1;  // Pass streams from each member to the next
  ChunkLayout layout_;
  v1::RoundHeader header_;
  std::vector<std::unique_ptr<DataPlaneServer>> servers_;
  std::vector<std::vector<float>> params_;
  std::vector<float> global_;
  std::vector<std::unique_ptr<Received>> received_;
};

void RingMemberTest::RunRound(double tolerance) {
  std::vector<std::unique_ptr<RingMember>> members;
  for (int i = 0; i < members_; ++i) members.push_back(Start(i));
  // Every member ends up with every chunk: wait, then stop.
  for (int i = 0; i < members_; ++i) {
    std::pair<Received*, int> all(received_[i].get(), layout_.num_chunks());
    MutexLock lock(&received_[i]->mu);
    ASSERT_TRUE(received_[i]->mu.AwaitWithTimeout(
        absl::Condition(
            +[](std::pair<Received*, int>* r) ABSL_NO_THREAD_SAFETY_ANALYSIS {
              return static_cast<int>(r->first->chunks.size()) == r->second;
            },
            &all),
        absl::Seconds(30)))
        << "member " << i;
  }
  for (auto& member : members) EXPECT_TRUE(member->Stop(true).ok());
  for (int c = 0; c < layout_.num_chunks(); ++c) {
    MutexLock lock0(&received_[0]->mu);
    const std::vector<float>& got = received_[0]->chunks[c];
    for (int64_t k = 0; k < layout_.size(c); ++k) {
      const int64_t v = layout_.begin(c) + k;
      double expected = 0;
      for (int i = 0; i < members_; ++i) expected += (i + 1) * (params_[i][v] - global_[v]);
      EXPECT_NEAR(got[k], expected / (members_ * (members_ + 1) / 2), tolerance)
          << "chunk " << c << " value " << k;
    }
    for (int i = 1; i < members_; ++i) {
      MutexLock lock(&received_[i]->mu);
      EXPECT_EQ(std::memcmp(received_[i]->chunks[c].data(), got.data(), got.size() * sizeof(float)),
                0)
          << "member " << i << " chunk " << c;
    }
  }
  for (int i = 0; i < members_; ++i) {
    MutexLock lock(&received_[i]->mu);
    EXPECT_THAT(received_[i]->unreachable, ::testing::IsEmpty()) << "member " << i;
  }
}

TEST_F(RingMemberTest, EveryMemberGetsTheWeightedMeanOfEveryChunkBitForBit) { RunRound(); }

// Lossy codecs go round the ring too: each sum travels encoded and is added to in fp32, the
// owner encodes the mean once, and every member decodes the same bytes. The means' errors
// (deltas within [-0.65, 0.35], weights 1 to 3) stay within a few encodings' rounding.
TEST_F(RingMemberTest, LossyCodecsGoRoundTheRingBitForBitAlike) {
  for (const auto& [codec, tolerance] : std::vector<std::pair<v1::Codec, double>>{
           {v1::CODEC_BF16, 0.01}, {v1::CODEC_FP16, 0.002}, {v1::CODEC_INT8, 0.02}}) {
    SCOPED_TRACE(CodecName(codec));
    Lay({0, 2, 4, 7}, 7 * kChunkValues - 30);
    header_.set_codec(codec);
    RunRound(tolerance);
  }
}

// Ranges many times the chain's lead, of unequal sizes: every chain is started a few chunks
// at a time, as sums come in, and every one completes.
TEST_F(RingMemberTest, LongRangesOfUnequalSizesComplete) {
  Lay({0, 15, 30, 45, 61}, 61 * kChunkValues - 7);
  RunRound();
}

// Each member's messages spread over several streams to the next, each on a connection of its
// own, arriving in any order: every chunk's mean is the same, bit for bit, on every member.
TEST_F(RingMemberTest, StripesOverSeveralConnectionsCarryTheSameRound) {
  Lay({0, 15, 30, 45, 61}, 61 * kChunkValues - 7);
  stripes_ = 3;
  RunRound();
}

// With 2 members each is the other's pred and succ: a mean that comes is not passed on (its
// owner is succ), and each chain is paced by the other's.
TEST_F(RingMemberTest, ARingOfTwoCompletes) {
  Lay({0, 20, 41}, 41 * kChunkValues - 3);
  RunRound();
}

// A member starts no more than kChainLead chunks of its chain before any sum has come from
// its predecessor (here never started).
TEST_F(RingMemberTest, AChainRunsOnlyALeadAheadOfWhatCameIn) {
  Lay({0, 20, 40, 61}, 61 * kChunkValues);
  RingInbox* succ_inbox = servers_[2]->inbox();
  succ_inbox->Follow("run", 5, 2, "m1");
  std::unique_ptr<RingMember> m1 = Start(1);
  for (int k = 0; k < RingPlan::kChainLead; ++k) {
    absl::StatusOr<std::optional<ReceivedChunk>> next = succ_inbox->Next();
    ASSERT_TRUE(next.ok()) << next.status();
    ASSERT_TRUE(next->has_value());
    EXPECT_EQ((*next)->field(), v1::PassRequest::kSumFieldNumber);
    EXPECT_EQ((*next)->index(), k);  // m0's range, in order
  }
  // Time for a writer that ran on to send more, then the round ends: nothing else came.
  absl::SleepFor(absl::Milliseconds(300));
  m1->Stop(false).IgnoreError();
  absl::StatusOr<std::optional<ReceivedChunk>> next = succ_inbox->Next();
  EXPECT_FALSE(next.ok() && next->has_value()) << "chunk " << (*next)->index() << " came";
}

// A member whose successor is gone names it; the others, stopped as the round ends, say
// nothing more.
TEST_F(RingMemberTest, ANeighbourThatIsGoneIsNamedAndStopEndsTheRound) {
  servers_[2]->Shutdown();
  std::unique_ptr<RingMember> m1 = Start(1, /*wait_for_ready=*/false);
  {
    MutexLock lock(&received_[1]->mu);
    ASSERT_TRUE(received_[1]->mu.AwaitWithTimeout(
        absl::Condition(
            +[](std::vector<std::string>* ids) { return !ids->empty(); },
            &received_[1]->unreachable),
        absl::Seconds(30)));
    EXPECT_EQ(received_[1]->unreachable[0], "m2");
  }
  m1->Stop(false).IgnoreError();
  std::unique_ptr<RingMember> m0 = Start(0, /*wait_for_ready=*/false);
  EXPECT_TRUE(m0->Stop(false).ok());  // before anything came: ends both threads, reports nothing
  MutexLock lock(&received_[0]->mu);
  EXPECT_THAT(received_[0]->unreachable, ::testing::IsEmpty());
}

}  // namespace
}  // namespace localsgd
