#include "exchange/received_chunk.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "exchange/chunk_wire.h"
#include "gtest/gtest.h"
#include "proto/localsgd/v1/averaging.pb.h"
#include "tests/testutil/test_chunk.h"

namespace localsgd {
namespace {

using ::localsgd::testing::MakeChunk;

std::string Joined(const ReceivedChunk& chunk) {
  std::string bytes;
  for (absl::string_view piece : chunk.data()) bytes.append(piece.data(), piece.size());
  return bytes;
}

// `bytes` as gRPC might receive them: in slices of `piece` bytes.
grpc::ByteBuffer InPieces(const std::string& bytes, size_t piece) {
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < bytes.size(); at += piece) {
    slices.emplace_back(bytes.data() + at, std::min(piece, bytes.size() - at));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

// Protobuf's bytes for PassRequest{sum or mean: chunk}.
std::string PassBytes(int field, const v1::Chunk& chunk) {
  v1::PassRequest message;
  *(field == v1::PassRequest::kSumFieldNumber ? message.mutable_sum() : message.mutable_mean()) =
      chunk;
  return message.SerializeAsString();
}

// What protobuf's serialiser writes is read, whatever the index, the size and the slices.
TEST(ReceivedChunkTest, ReadsProtobufsFormInAnySlices) {
  for (int32_t index : {0, 1, 127, 128, 300000, std::numeric_limits<int32_t>::max(), -1}) {
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{5}, size_t{4096}, size_t{1} << 20}) {
      for (size_t piece : {size_t{1}, size_t{3}, size_t{8192}, size_t{1} << 22}) {
        if (piece == 1 && bytes > 4096) continue;  // a million slices of a byte: slow, and no news
        const v1::Chunk chunk = MakeChunk(index, bytes);
        const std::string wire = PassBytes(v1::PassRequest::kMeanFieldNumber, chunk);
        std::optional<ReceivedChunk> read = ReceivedChunk::Read(InPieces(wire, piece));
        ASSERT_TRUE(read.has_value()) << index << " " << bytes << " " << piece;
        EXPECT_EQ(read->field(), v1::PassRequest::kMeanFieldNumber);
        EXPECT_EQ(read->index(), index);
        EXPECT_EQ(read->size(), bytes);
        EXPECT_EQ(Joined(*read), chunk.data()) << index << " " << bytes << " " << piece;
      }
    }
  }
}

// The data is viewed where it lies: the chunk's own bytes for a message ChunkMessageBuffer
// made, kept alive by the ReceivedChunk after everything else let go; and the wire is the
// message itself.
TEST(ReceivedChunkTest, ViewsTheBytesWhereTheyLieAndKeepsThemAlive) {
  auto chunk = std::make_shared<v1::Chunk>(MakeChunk(9, 1 << 16));
  const char* data = chunk->data().data();
  std::weak_ptr<v1::Chunk> watch = chunk;
  std::optional<ReceivedChunk> read =
      ReceivedChunk::Read(ChunkMessageBuffer(v1::PassRequest::kSumFieldNumber, *chunk, chunk));
  chunk.reset();
  ASSERT_TRUE(read.has_value());
  ASSERT_EQ(read->data().size(), 1u);
  EXPECT_EQ(read->data()[0].data(), data);
  EXPECT_FALSE(watch.expired());
  std::optional<ReceivedChunk> moved(std::move(*read));
  read.reset();
  EXPECT_EQ(moved->data()[0].data(), data);
  v1::PassRequest parsed;
  {
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(moved->wire().Dump(&slices).ok());
    std::string bytes;
    for (const grpc::Slice& s : slices) {
      bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
    ASSERT_TRUE(parsed.ParseFromString(bytes));
  }
  EXPECT_EQ(parsed.sum().index(), 9);
  EXPECT_EQ(parsed.sum().data().size(), size_t{1} << 16);
  moved.reset();
  EXPECT_TRUE(watch.expired());
}

// Valid protobuf in another form, and what is not protobuf at all, is left to a typed parse.
TEST(ReceivedChunkTest, AnyOtherFormIsLeftToATypedParse) {
  const v1::Chunk chunk = MakeChunk(3, 16);
  const std::string canonical = PassBytes(v1::PassRequest::kSumFieldNumber, chunk);
  // data before index
  std::string reordered = "\x12\x14\x12\x10" + chunk.data() + "\x08\x03";
  v1::PassRequest check;
  ASSERT_TRUE(check.ParseFromString(reordered));
  ASSERT_EQ(check.sum().index(), 3);
  // an unknown field inside the chunk, bytes after the message, a truncated message, a
  // varint outer field, an empty buffer
  std::string unknown = "\x12\x16\x08\x03\x18\x01\x12\x10" + chunk.data();
  for (const std::string& bytes :
       {reordered, unknown, canonical + std::string("\x08\x01", 2),
        canonical.substr(0, canonical.size() - 1), std::string("\x08\x05", 2), std::string()}) {
    EXPECT_FALSE(ReceivedChunk::Read(InPieces(bytes, 5)).has_value())
        << absl::CEscape(bytes.substr(0, 8));
  }
}

// A length in more than 5 bytes (an overlong encoding, even of 0) fails protobuf's parse, so
// Read does not take it either.
TEST(ReceivedChunkTest, LengthsProtobufRefusesAreLeftToATypedParse) {
  const std::string overlong_data =
      std::string("\x12\x0c\x08\x03\x12", 5) + std::string(8, '\x80') + std::string(1, '\0');
  const std::string overlong_outer =
      std::string("\x12\x82\x80\x80\x80\x80\x00", 7) + std::string("\x08\x03", 2);
  for (const std::string& bytes : {overlong_data, overlong_outer}) {
    v1::PassRequest check;
    EXPECT_FALSE(check.ParseFromString(bytes)) << absl::CEscape(bytes);
    EXPECT_FALSE(ReceivedChunk::Read(InPieces(bytes, 5)).has_value()) << absl::CEscape(bytes);
  }
  // The same messages with the shortest lengths are read.
  EXPECT_TRUE(
      ReceivedChunk::Read(InPieces(std::string("\x12\x04\x08\x03\x12\x00", 6), 5)).has_value());
  EXPECT_TRUE(ReceivedChunk::Read(InPieces(std::string("\x12\x02\x08\x03", 4), 5)).has_value());
}

TEST(ReceivedChunkTest, OfGivesTheChunkInThatForm) {
  ReceivedChunk of = ReceivedChunk::Of(v1::PassRequest::kMeanFieldNumber, MakeChunk(-7, 40));
  EXPECT_EQ(of.field(), v1::PassRequest::kMeanFieldNumber);
  EXPECT_EQ(of.index(), -7);
  EXPECT_EQ(Joined(of), MakeChunk(-7, 40).data());
}

TEST(ReceivedChunkTest, DecodesFp32AcrossSlicesAndRefusesWrongSizesAndNonFiniteValues) {
  v1::Chunk chunk;
  chunk.set_index(1);
  std::vector<float> values = {1.5f, -2.25f, 3e-8f, 7.0f, -0.0f};
  chunk.set_data(std::string(reinterpret_cast<const char*>(values.data()), 20));
  std::optional<ReceivedChunk> read =
      ReceivedChunk::Read(InPieces(PassBytes(v1::PassRequest::kSumFieldNumber, chunk), 3));
  ASSERT_TRUE(read.has_value());
  ASSERT_GT(read->data().size(), 1u);  // floats split between slices
  std::vector<float> out(5);
  ASSERT_TRUE(read->DecodeFp32(absl::MakeSpan(out)).ok());
  EXPECT_EQ(std::memcmp(out.data(), values.data(), 20), 0);
  std::vector<float> four(4);
  EXPECT_EQ(read->DecodeFp32(absl::MakeSpan(four)).code(), absl::StatusCode::kInvalidArgument);
  values[3] = std::numeric_limits<float>::infinity();
  chunk.set_data(std::string(reinterpret_cast<const char*>(values.data()), 20));
  ReceivedChunk bad = ReceivedChunk::Of(v1::PassRequest::kSumFieldNumber, chunk);
  EXPECT_EQ(bad.DecodeFp32(absl::MakeSpan(out)).code(), absl::StatusCode::kInvalidArgument);
}

// Values split over two or more slices (down to slices of one byte) are gathered; the runs
// cover every value once, in order.
TEST(ReceivedChunkTest, WalksFp32ValuesInRunsWhateverTheSlices) {
  std::vector<float> values(37);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.5f * static_cast<float>(i) - 3.0f;
  v1::Chunk chunk;
  chunk.set_index(2);
  chunk.set_data(
      std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
  const std::string wire = PassBytes(v1::PassRequest::kSumFieldNumber, chunk);
  // The message's bytes with a gap after each piece: gRPC merges small slices that hold their
  // own bytes, and slices that lie end to end, into one.
  std::string spread(2 * wire.size(), '\0');
  for (size_t piece : {1, 2, 3, 5, 7, 4096}) {
    std::vector<grpc::Slice> slices;
    for (size_t at = 0; at < wire.size(); at += piece) {
      const size_t n = std::min(piece, wire.size() - at);
      std::memcpy(spread.data() + 2 * at, wire.data() + at, n);
      slices.emplace_back(spread.data() + 2 * at, n, grpc::Slice::STATIC_SLICE);
    }
    std::optional<ReceivedChunk> read =
        ReceivedChunk::Read(grpc::ByteBuffer(slices.data(), slices.size()));
    ASSERT_TRUE(read.has_value()) << piece;
    std::vector<float> walked;
    int runs = 0;
    read->ForEachFp32Run([&](const char* bytes, size_t first, size_t n) {
      ASSERT_EQ(first, walked.size()) << piece;
      ASSERT_GT(n, 0u) << piece;
      for (size_t j = 0; j < n; ++j) {
        float value;
        std::memcpy(&value, bytes + j * sizeof(float), sizeof(float));
        walked.push_back(value);
      }
      ++runs;
    });
    ASSERT_EQ(walked.size(), values.size()) << piece;
    EXPECT_EQ(std::memcmp(walked.data(), values.data(), values.size() * sizeof(float)), 0) << piece;
    if (piece < sizeof(float)) EXPECT_EQ(runs, static_cast<int>(values.size())) << piece;
    if (piece == 3) EXPECT_GT(read->data().size(), values.size());  // values over 2 slices
    if (piece == 4096) EXPECT_EQ(runs, 1);
  }
}

}  // namespace
}  // namespace localsgd
