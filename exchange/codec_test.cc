#include "exchange/codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <vector>

#include "exchange/chunking.h"
#include "gtest/gtest.h"
#include "tests/testutil/random_vector.h"

namespace localsgd {
namespace {

// n values from N(0, scale^2).
std::vector<float> RandomValues(size_t n, float scale, uint32_t seed) {
  return testing::RandomVector(n, seed, scale);
}

std::vector<float> RoundTrip(v1::Codec codec, const std::vector<float>& in) {
  std::string bytes;
  Encode(codec, in, &bytes);
  EXPECT_EQ(bytes.size(), EncodedBytes(codec, static_cast<int64_t>(in.size())));
  std::vector<float> out(in.size());
  absl::Status status = Decode(codec, bytes, absl::MakeSpan(out));
  EXPECT_TRUE(status.ok()) << status;
  return out;
}

TEST(CodecTest, Fp32IsExact) {
  std::vector<float> in = RandomValues(1000, 3.0f, 1);
  in.push_back(std::numeric_limits<float>::denorm_min());
  in.push_back(-0.0f);
  std::vector<float> out = RoundTrip(v1::CODEC_FP32, in);
  EXPECT_EQ(std::memcmp(in.data(), out.data(), in.size() * sizeof(float)), 0);
}

TEST(CodecTest, Bf16RelativeErrorAtMostTwoToTheMinusEight) {
  for (float scale : {1e-30f, 1e-3f, 1.0f, 1e30f}) {
    std::vector<float> in = RandomValues(4096, scale, 2);
    std::vector<float> out = RoundTrip(v1::CODEC_BF16, in);
    for (size_t i = 0; i < in.size(); ++i) {
      ASSERT_LE(std::fabs(out[i] - in[i]), std::ldexp(std::fabs(in[i]), -8)) << in[i];
    }
  }
  EXPECT_EQ(RoundTrip(v1::CODEC_BF16, {1.0f, -2.5f, 0.0f}),
            (std::vector<float>{1.0f, -2.5f, 0.0f}));
}

TEST(CodecTest, Fp16RoundTripsNormalsAndSubnormals) {
  std::vector<float> in = RandomValues(4096, 10.0f, 3);
  std::vector<float> out = RoundTrip(v1::CODEC_FP16, in);
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_LE(std::fabs(out[i] - in[i]), std::ldexp(std::fabs(in[i]), -11) + 1e-7f) << in[i];
  }
  // Exactly representable values survive; a subnormal half rounds to the nearest step.
  std::vector<float> exact = {1.0f, -0.5f, 65504.0f, 6.103515625e-05f, 5.9604644775390625e-08f,
                              0.0f};
  EXPECT_EQ(RoundTrip(v1::CODEC_FP16, exact), exact);
  std::vector<float> tiny = RoundTrip(v1::CODEC_FP16, {1e-6f});
  EXPECT_NEAR(tiny[0], 1e-6f, 3e-8f);
}

TEST(CodecTest, Fp16MatchesTheReferenceConversionBitForBit) {
  // Every finite half value decodes and re-encodes to itself, whichever conversion path (F16C
  // or the portable one) this machine takes; values between halves round to nearest even.
  std::vector<float> halves;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if (((h >> 10) & 0x1f) == 0x1f) continue;  // Inf and NaN
    std::string bytes(2, '\0');
    bytes[0] = static_cast<char>(h & 0xff);
    bytes[1] = static_cast<char>(h >> 8);
    std::vector<float> one(1);
    ASSERT_TRUE(Decode(v1::CODEC_FP16, bytes, absl::MakeSpan(one)).ok()) << h;
    halves.push_back(one[0]);
  }
  std::string encoded;
  Encode(v1::CODEC_FP16, halves, &encoded);
  std::vector<float> decoded(halves.size());
  ASSERT_TRUE(Decode(v1::CODEC_FP16, encoded, absl::MakeSpan(decoded)).ok());
  EXPECT_EQ(std::memcmp(decoded.data(), halves.data(), halves.size() * sizeof(float)), 0);
  // 1 + 2^-11 lies halfway between 1 and the next half: ties go to the even mantissa (1).
  std::vector<float> ties = {1.0f + std::ldexp(1.0f, -11), 1.0f + 3 * std::ldexp(1.0f, -11)};
  std::vector<float> rounded = RoundTrip(v1::CODEC_FP16, ties);
  EXPECT_EQ(rounded[0], 1.0f);
  EXPECT_EQ(rounded[1], 1.0f + 2 * std::ldexp(1.0f, -10));
}

TEST(CodecTest, Fp16OverflowIsRefusedOnDecode) {
  std::string bytes;
  Encode(v1::CODEC_FP16, std::vector<float>{1e6f}, &bytes);
  std::vector<float> out(1);
  EXPECT_EQ(Decode(v1::CODEC_FP16, bytes, absl::MakeSpan(out)).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CodecTest, Int8ErrorAtMostBlockAbsmaxOver127) {
  std::vector<float> in = RandomValues(10 * kInt8BlockValues + 17, 1.0f, 4);
  in[5] = 40.0f;  // one block with a large outlier
  std::vector<float> out = RoundTrip(v1::CODEC_INT8, in);
  for (size_t b = 0; b * kInt8BlockValues < in.size(); ++b) {
    size_t begin = b * kInt8BlockValues;
    size_t end = std::min(in.size(), begin + kInt8BlockValues);
    float absmax = 0;
    for (size_t i = begin; i < end; ++i) absmax = std::max(absmax, std::fabs(in[i]));
    for (size_t i = begin; i < end; ++i) {
      ASSERT_LE(std::fabs(out[i] - in[i]), absmax / 127.0f) << i;
    }
  }
  EXPECT_EQ(EncodedBytes(v1::CODEC_INT8, 512), 2 * sizeof(float) + 512);
  std::vector<float> zeros(300, 0.0f);
  EXPECT_EQ(RoundTrip(v1::CODEC_INT8, zeros), zeros);
}

// Found by tests/fuzz/codec_fuzzer: 127 * (FLT_MAX / 127) rounds to infinity.
TEST(CodecTest, Int8NearTheLargestFloatDecodesFinite) {
  const float max = std::numeric_limits<float>::max();
  const std::vector<float> values = {max, -max, 1.0f, 0.0f};
  std::string bytes;
  Encode(v1::CODEC_INT8, values, &bytes);
  std::vector<float> decoded(values.size());
  ASSERT_TRUE(Decode(v1::CODEC_INT8, bytes, absl::MakeSpan(decoded)).ok());
  EXPECT_GT(decoded[0], 0.99f * max);
  EXPECT_LT(decoded[1], -0.99f * max);
}

TEST(CodecTest, WrongSizeAndNonFiniteAreRefused) {
  std::vector<float> out(4);
  for (v1::Codec codec : {v1::CODEC_FP32, v1::CODEC_BF16, v1::CODEC_FP16, v1::CODEC_INT8}) {
    std::string bytes;
    Encode(codec, std::vector<float>(4, 1.0f), &bytes);
    EXPECT_EQ(Decode(codec, bytes.substr(1), absl::MakeSpan(out)).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(Decode(codec, bytes + "x", absl::MakeSpan(out)).code(),
              absl::StatusCode::kInvalidArgument);
    std::vector<float> bad = {1.0f, std::nanf(""), 2.0f, 3.0f};
    Encode(codec, bad, &bytes);
    EXPECT_EQ(Decode(codec, bytes, absl::MakeSpan(out)).code(), absl::StatusCode::kInvalidArgument)
        << CodecName(codec);
    bad[1] = std::numeric_limits<float>::infinity();
    Encode(codec, bad, &bytes);
    EXPECT_EQ(Decode(codec, bytes, absl::MakeSpan(out)).code(), absl::StatusCode::kInvalidArgument)
        << CodecName(codec);
  }
  EXPECT_EQ(Decode(static_cast<v1::Codec>(99), "", absl::Span<float>()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CodecTest, EncodeDifferenceEqualsEncodeOfTheDifference) {
  std::vector<float> a = RandomValues(3 * kInt8BlockValues + 5, 1.0f, 8);
  std::vector<float> b = RandomValues(a.size(), 1.0f, 9);
  std::vector<float> diff(a.size());
  for (size_t i = 0; i < a.size(); ++i) diff[i] = a[i] - b[i];
  for (v1::Codec codec : {v1::CODEC_FP32, v1::CODEC_BF16, v1::CODEC_FP16, v1::CODEC_INT8}) {
    std::string fused, separate;
    EncodeDifference(codec, a, b, &fused);
    Encode(codec, diff, &separate);
    EXPECT_EQ(fused, separate) << CodecName(codec);
  }
}

// The conversions as plain scalar code, one value at a time, the way the codecs were first
// written (a branch for NaN; the maximum over floats): the vectorised loops must give the same
// bytes, whatever the values.
uint16_t ReferenceBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

std::string ReferenceInt8(const std::vector<float>& values) {
  const size_t n = values.size();
  const size_t blocks = (n + kInt8BlockValues - 1) / kInt8BlockValues;
  std::string out(blocks * sizeof(float) + n, '\0');
  for (size_t b = 0; b < blocks; ++b) {
    const size_t begin = b * kInt8BlockValues;
    const size_t end = std::min(n, begin + static_cast<size_t>(kInt8BlockValues));
    float absmax = 0;
    bool bad = false;
    for (size_t i = begin; i < end; ++i) {
      absmax = std::max(absmax, std::fabs(values[i]));
      bad |= !std::isfinite(values[i]);
    }
    float scale = bad ? std::numeric_limits<float>::quiet_NaN() : absmax / 127.0f;
    if (std::isinf(scale * 127.0f)) scale = std::nextafter(scale, 0.0f);
    std::memcpy(out.data() + b * sizeof(float), &scale, sizeof(float));
    const float inverse = absmax > 0 ? 127.0f / absmax : 0.0f;
    for (size_t i = begin; i < end; ++i) {
      const float v = std::min(127.0f, std::max(-127.0f, values[i] * inverse));
      out[blocks * sizeof(float) + i] = static_cast<char>(static_cast<int8_t>(std::nearbyint(v)));
    }
  }
  return out;
}

// Random values with every kind of special one mixed in; the last int8 block is short (13
// values), so the vector loops' scalar tails run too.
std::vector<float> AwkwardValues() {
  std::vector<float> values = RandomValues(4 * kInt8BlockValues + 13, 3.0f, 21);
  const float specials[] = {0.0f,
                            -0.0f,
                            std::numeric_limits<float>::denorm_min(),
                            -std::numeric_limits<float>::min(),
                            std::numeric_limits<float>::max(),
                            -std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            -std::numeric_limits<float>::quiet_NaN(),
                            1.0f + std::ldexp(1.0f, -8),       // a bf16 tie, to even (down)
                            1.0f + 3 * std::ldexp(1.0f, -8)};  // a bf16 tie, to even (up)
  // Specials in the first three blocks; the others stay finite, so their int8 blocks decode.
  for (size_t k = 0; k < std::size(specials); ++k)
    values[k * 61 % (3 * kInt8BlockValues)] = specials[k];
  uint32_t payload_nan = 0x7fa12345u;  // a signalling NaN with a payload
  std::memcpy(&values[7], &payload_nan, 4);
  return values;
}

TEST(CodecTest, EncodingsMatchScalarReferencesBitForBit) {
  const std::vector<float> values = AwkwardValues();
  std::string bf16;
  Encode(v1::CODEC_BF16, values, &bf16);
  ASSERT_EQ(bf16.size(), 2 * values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, bf16.data() + 2 * i, 2);
    EXPECT_EQ(h, ReferenceBf16(values[i])) << "value " << i << ": " << values[i];
  }
  std::string int8;
  Encode(v1::CODEC_INT8, values, &int8);
  EXPECT_EQ(int8, ReferenceInt8(values));
  // The fused difference goes through the same loops.
  const std::vector<float> zeros(values.size(), 0.0f);
  std::string difference;
  EncodeDifference(v1::CODEC_BF16, values, zeros, &difference);
  EXPECT_EQ(difference, bf16);
  EncodeDifference(v1::CODEC_INT8, values, zeros, &difference);
  EXPECT_EQ(difference, int8);
}

TEST(CodecTest, Bf16DecodesEveryFiniteBitPatternExactly) {
  std::string bytes;
  std::vector<float> expected;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if (((h >> 7) & 0xff) == 0xff) continue;  // Inf and NaN, which Decode refuses
    bytes.push_back(static_cast<char>(h & 0xff));
    bytes.push_back(static_cast<char>(h >> 8));
    const uint32_t bits = h << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    expected.push_back(f);
  }
  std::vector<float> out(expected.size());
  ASSERT_TRUE(Decode(v1::CODEC_BF16, bytes, absl::MakeSpan(out)).ok());
  EXPECT_EQ(std::memcmp(out.data(), expected.data(), out.size() * sizeof(float)), 0);
}

TEST(CodecTest, CheckFp32RefusesWrongSizesAndNonFinite) {
  std::string bytes;
  Encode(v1::CODEC_FP32, std::vector<float>{1, 2, 3}, &bytes);
  EXPECT_TRUE(CheckFp32(bytes, 3).ok());
  EXPECT_EQ(CheckFp32(bytes, 4).code(), absl::StatusCode::kInvalidArgument);
  Encode(v1::CODEC_FP32, std::vector<float>{1, std::numeric_limits<float>::infinity(), 3}, &bytes);
  EXPECT_EQ(CheckFp32(bytes, 3).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChunkLayoutTest, ChunksCoverTheVectorInWholeBlocks) {
  ChunkLayout layout = ChunkLayout::ForBytes(1'000'000, 1 << 20);
  EXPECT_EQ(layout.chunk_values, 262144);
  EXPECT_EQ(layout.num_chunks(), 4);
  EXPECT_EQ(layout.begin(3), 786432);
  EXPECT_EQ(layout.end(3), 1'000'000);
  EXPECT_EQ(ChunkLayout::ForBytes(10, 100).chunk_values, kInt8BlockValues);
  EXPECT_EQ(ChunkLayout::ForBytes(10, 100).num_chunks(), 1);
  EXPECT_EQ(ChunkLayout::ForBytes(0, 4096).num_chunks(), 0);
}

}  // namespace
}  // namespace localsgd
