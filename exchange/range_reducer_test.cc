#include "exchange/range_reducer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "common/status_macros.h"
#include "exchange/codec.h"
#include "gtest/gtest.h"
#include "tests/testutil/random_vector.h"

namespace localsgd {
namespace {

using ::localsgd::testing::RandomVector;

RangeReducer::Options Opts(int64_t n, int64_t chunk_values, v1::Codec codec = v1::CODEC_FP32,
                           OuterOptimizer outer = {}) {
  RangeReducer::Options options;
  options.layout = ChunkLayout{n, chunk_values};
  options.codec = codec;
  options.outer = outer;
  return options;
}

// Encodes `delta`'s chunk and feeds it to the engine as a member would.
absl::Status Feed(RangeReducer& engine, int slot, int chunk, const std::vector<float>& delta,
                  v1::Codec codec = v1::CODEC_FP32) {
  const ChunkLayout& layout = engine.layout();
  std::string bytes;
  Encode(codec, absl::MakeConstSpan(delta.data() + layout.begin(chunk), layout.size(chunk)),
         &bytes);
  std::vector<float> decoded;
  LOCALSGD_RETURN_IF_ERROR(engine.deltas().DecodeChunk(chunk, bytes, &decoded));
  return engine.deltas().Accumulate(slot, chunk, decoded);
}

TEST(RangeReducerTest, WeightedMeanOfMembersAsThreadsMatchesReference) {
  const int kMembers = 4;
  const int64_t n = 10'000;
  std::vector<float> global = RandomVector(n, 99);
  RangeReducer engine(Opts(n, 1024), global);
  engine.BeginRound(kMembers);
  std::vector<std::vector<float>> deltas;
  std::vector<double> weights = {1, 2, 3, 4};
  for (int m = 0; m < kMembers; ++m) {
    deltas.push_back(RandomVector(n, m));
    ASSERT_TRUE(engine.deltas().SetWeight(m, weights[m]).ok());
  }
  Mutex mu;
  std::vector<std::thread> threads;
  for (int m = 0; m < kMembers; ++m) {
    threads.emplace_back([&, m] {
      for (int c = 0; c < engine.layout().num_chunks(); ++c) {
        std::string bytes;
        Encode(v1::CODEC_FP32,
               absl::MakeConstSpan(deltas[m].data() + engine.layout().begin(c),
                                   engine.layout().size(c)),
               &bytes);
        std::vector<float> decoded;
        ASSERT_TRUE(engine.deltas().DecodeChunk(c, bytes, &decoded).ok());  // const: no lock needed
        MutexLock lock(&mu);
        ASSERT_TRUE(engine.deltas().Accumulate(m, c, decoded).ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  auto done = engine.TakeCompleted();
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->size(), static_cast<size_t>(engine.layout().num_chunks()));
  ASSERT_TRUE(engine.AllComplete());
  engine.Commit();
  for (int64_t i = 0; i < n; ++i) {
    double mean = 0;
    for (int m = 0; m < kMembers; ++m) mean += weights[m] * deltas[m][i];
    mean /= 10.0;
    ASSERT_NEAR(engine.global()[i], global[i] + mean, 1e-6) << i;
  }
}

TEST(RangeReducerTest, ChunkCompletesAsSoonAsEveryMemberSentIt) {
  RangeReducer engine(Opts(1000, 256), std::vector<float>(1000));
  engine.BeginRound(2);
  std::vector<float> d0(1000, 1.0f), d1(1000, 3.0f);
  ASSERT_TRUE(engine.deltas().SetWeight(0, 1).ok());
  ASSERT_TRUE(engine.deltas().SetWeight(1, 1).ok());
  ASSERT_TRUE(Feed(engine, 0, 0, d0).ok());
  EXPECT_TRUE(engine.TakeCompleted()->empty());
  ASSERT_TRUE(Feed(engine, 1, 0, d1).ok());
  EXPECT_EQ(*engine.TakeCompleted(), std::vector<int>{0});  // before anyone sent chunk 1
  EXPECT_TRUE(engine.TakeCompleted()->empty());             // each chunk once
  std::vector<float> update(256);
  ASSERT_TRUE(Decode(v1::CODEC_FP32, engine.EncodedUpdate(0), absl::MakeSpan(update)).ok());
  EXPECT_FLOAT_EQ(update[0], 2.0f);
}

TEST(RangeReducerTest, DroppedMemberNoLongerBlocksAndAbortKeepsGlobal) {
  std::vector<float> global(512, 5.0f);
  RangeReducer engine(Opts(512, 256), global);
  engine.BeginRound(2);
  ASSERT_TRUE(engine.deltas().SetWeight(0, 1).ok());
  ASSERT_TRUE(engine.deltas().SetWeight(1, 1).ok());
  std::vector<float> d0(512, 2.0f), d1(512, 4.0f);
  ASSERT_TRUE(Feed(engine, 0, 0, d0).ok());
  ASSERT_TRUE(Feed(engine, 1, 0, d1).ok());
  ASSERT_TRUE(Feed(engine, 0, 1, d0).ok());
  EXPECT_EQ(*engine.TakeCompleted(), std::vector<int>{0});
  engine.deltas().Drop(1);  // member 1 dies before chunk 1
  EXPECT_EQ(engine.deltas().active_members(), 1);
  EXPECT_EQ(*engine.TakeCompleted(), std::vector<int>{1});
  ASSERT_TRUE(engine.AllComplete());
  engine.Commit();
  EXPECT_FLOAT_EQ(engine.global()[0], 8.0f);    // 5 + mean(2, 4)
  EXPECT_FLOAT_EQ(engine.global()[300], 7.0f);  // 5 + 2: only member 0 reached chunk 1

  engine.BeginRound(1);
  ASSERT_TRUE(engine.deltas().SetWeight(0, 1).ok());
  ASSERT_TRUE(Feed(engine, 0, 0, d0).ok());
  engine.Abort();
  EXPECT_FLOAT_EQ(engine.global()[0], 8.0f);
}

TEST(RangeReducerTest, BadInputIsRefusedAndChangesNothing) {
  RangeReducer engine(Opts(512, 256), std::vector<float>(512));
  engine.BeginRound(2);
  std::vector<float> d(512, 1.0f);
  EXPECT_EQ(Feed(engine, 0, 0, d).code(), absl::StatusCode::kInvalidArgument);  // no weight
  EXPECT_EQ(engine.deltas().SetWeight(0, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine.deltas().SetWeight(0, -1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine.deltas().SetWeight(0, std::nan("")).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(engine.deltas().SetWeight(0, 1).ok());
  ASSERT_TRUE(Feed(engine, 0, 0, d).ok());
  EXPECT_EQ(Feed(engine, 0, 0, d).code(), absl::StatusCode::kInvalidArgument);  // duplicate
  std::vector<float> out;
  EXPECT_EQ(engine.deltas().DecodeChunk(2, "", &out).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine.deltas().DecodeChunk(-1, "", &out).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine.deltas().DecodeChunk(1, std::string(100, 'x'), &out).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<float> nan(512, std::nanf(""));
  EXPECT_EQ(Feed(engine, 0, 1, nan).code(), absl::StatusCode::kInvalidArgument);
  engine.deltas().Drop(1);
  ASSERT_TRUE(Feed(engine, 0, 1, d).ok());  // the refused NaN chunk did not count
  EXPECT_EQ(engine.TakeCompleted()->size(), 2u);
}

TEST(RangeReducerTest, Fp32BytesAccumulateLikeDecodedValues) {
  std::vector<float> d0 = RandomVector(600, 1), d1 = RandomVector(600, 2);
  RangeReducer decoded(Opts(600, 256), std::vector<float>(600));
  RangeReducer in_place(Opts(600, 256), std::vector<float>(600));
  for (RangeReducer* engine : {&decoded, &in_place}) {
    engine->BeginRound(2);
    ASSERT_TRUE(engine->deltas().SetWeight(0, 1).ok());
    ASSERT_TRUE(engine->deltas().SetWeight(1, 3).ok());
  }
  for (int c = 0; c < 3; ++c) {
    for (int m = 0; m < 2; ++m) {
      const std::vector<float>& d = m == 0 ? d0 : d1;
      ASSERT_TRUE(Feed(decoded, m, c, d).ok());
      std::string bytes;
      Encode(v1::CODEC_FP32,
             absl::MakeConstSpan(d.data() + in_place.layout().begin(c), in_place.layout().size(c)),
             &bytes);
      ASSERT_TRUE(CheckFp32(bytes, static_cast<size_t>(in_place.layout().size(c))).ok());
      ASSERT_TRUE(in_place.deltas().AccumulateFp32(m, c, bytes).ok());
    }
  }
  EXPECT_EQ(in_place.deltas().AccumulateFp32(0, 0, std::string(256 * 4, '\0')).code(),
            absl::StatusCode::kInvalidArgument);  // duplicate
  ASSERT_EQ(decoded.TakeCompleted()->size(), 3u);
  ASSERT_EQ(in_place.TakeCompleted()->size(), 3u);
  decoded.Commit();
  in_place.Commit();
  EXPECT_EQ(std::memcmp(decoded.global().data(), in_place.global().data(), 600 * sizeof(float)), 0);
}

TEST(RangeReducerTest, OuterNesterovMomentumMatchesReference) {
  OuterOptimizer diloco{0.7, 0.9, true};
  RangeReducer engine(Opts(256, 256, v1::CODEC_FP32, diloco), std::vector<float>(256));
  double global = 0, momentum = 0;
  for (int round = 0; round < 3; ++round) {
    engine.BeginRound(1);
    ASSERT_TRUE(engine.deltas().SetWeight(0, 1).ok());
    std::vector<float> d(256, 1.0f + round);
    ASSERT_TRUE(Feed(engine, 0, 0, d).ok());
    ASSERT_EQ(engine.TakeCompleted()->size(), 1u);
    engine.Commit();
    momentum = 0.9 * momentum + (1.0 + round);
    global += 0.7 * ((1.0 + round) + 0.9 * momentum);
    EXPECT_NEAR(engine.global()[7], global, 1e-5) << round;
  }
}

// A coordinator restarted from a saved global and momentum goes on exactly as the original.
TEST(RangeReducerTest, RestoredGlobalAndMomentumContinueBitIdentically) {
  OuterOptimizer diloco{0.7, 0.9, true};
  auto round = [](RangeReducer& engine, float value) {
    engine.BeginRound(1);
    ASSERT_TRUE(engine.deltas().SetWeight(0, 1).ok());
    ASSERT_TRUE(Feed(engine, 0, 0, RandomVector(64, static_cast<int>(value))).ok());
    ASSERT_EQ(engine.TakeCompleted()->size(), 1u);
    engine.Commit();
  };
  RangeReducer original(Opts(64, 64, v1::CODEC_FP32, diloco), RandomVector(64, 1));
  round(original, 2);
  round(original, 3);
  RangeReducer restored(Opts(64, 64, v1::CODEC_FP32, diloco),
                        {original.global().begin(), original.global().end()});
  ASSERT_TRUE(
      restored.RestoreMomentum({original.momentum().begin(), original.momentum().end()}).ok());
  round(original, 4);
  round(restored, 4);
  EXPECT_EQ(std::memcmp(original.global().data(), restored.global().data(), 64 * sizeof(float)), 0);

  EXPECT_FALSE(restored.RestoreMomentum(std::vector<float>(63)).ok());
  EXPECT_FALSE(restored.RestoreMomentum(std::vector<float>(64, NAN)).ok());
  RangeReducer plain(Opts(64, 64), std::vector<float>(64));
  EXPECT_TRUE(plain.RestoreMomentum({}).ok());
  EXPECT_FALSE(plain.RestoreMomentum(std::vector<float>(64)).ok());
}

TEST(RangeReducerTest, LossyCodecsApplyExactlyTheEncodedUpdate) {
  for (v1::Codec codec : {v1::CODEC_BF16, v1::CODEC_FP16, v1::CODEC_INT8}) {
    std::vector<float> global = RandomVector(1000, 5);
    RangeReducer engine(Opts(1000, 512, codec), global);
    engine.BeginRound(2);
    ASSERT_TRUE(engine.deltas().SetWeight(0, 1).ok());
    ASSERT_TRUE(engine.deltas().SetWeight(1, 1).ok());
    std::vector<float> d0 = RandomVector(1000, 6, 0.01f), d1 = RandomVector(1000, 7, 0.01f);
    for (int c = 0; c < 2; ++c) {
      ASSERT_TRUE(Feed(engine, 0, c, d0, codec).ok());
      ASSERT_TRUE(Feed(engine, 1, c, d1, codec).ok());
    }
    ASSERT_EQ(engine.TakeCompleted()->size(), 2u);
    // What a member does with the bytes it receives.
    std::vector<float> member = global;
    for (int c = 0; c < 2; ++c) {
      std::vector<float> update(static_cast<size_t>(engine.layout().size(c)));
      ASSERT_TRUE(Decode(codec, engine.EncodedUpdate(c), absl::MakeSpan(update)).ok());
      for (size_t i = 0; i < update.size(); ++i) member[engine.layout().begin(c) + i] += update[i];
    }
    engine.Commit();
    EXPECT_EQ(std::memcmp(member.data(), engine.global().data(), 1000 * sizeof(float)), 0)
        << CodecName(codec);
  }
}

TEST(RangeReducerTest, Fp16OverflowAbortsInsteadOfApplyingInfinity) {
  RangeReducer engine(Opts(256, 256, v1::CODEC_FP16, OuterOptimizer{10, 0, false}),
                      std::vector<float>(256));
  engine.BeginRound(1);
  ASSERT_TRUE(engine.deltas().SetWeight(0, 1).ok());
  ASSERT_TRUE(Feed(engine, 0, 0, std::vector<float>(256, 60000.0f), v1::CODEC_FP16).ok());
  EXPECT_EQ(engine.TakeCompleted().status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_FALSE(engine.AllComplete());
}

}  // namespace
}  // namespace localsgd
