#include "exchange/chunk_wire.h"

#include <grpcpp/impl/codegen/proto_utils.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "proto/localsgd/v1/averaging.grpc.pb.h"
#include "tests/testutil/test_chunk.h"

namespace localsgd {
namespace {

using ::localsgd::testing::MakeChunk;

std::vector<grpc::Slice> Slices(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  return slices;
}

std::string Bytes(const grpc::ByteBuffer& buffer) {
  std::string bytes;
  for (const grpc::Slice& s : Slices(buffer)) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return bytes;
}

template <typename Message>
Message Parse(grpc::ByteBuffer buffer) {
  Message message;
  EXPECT_TRUE(grpc::SerializationTraits<Message>::Deserialize(&buffer, &message).ok());
  return message;
}

// `Message` with only its field `field` set, to `chunk`: protobuf's bytes and ours agree.
template <typename Message>
void ExpectProtobufsWireForm(int field, const v1::Chunk& chunk) {
  Message message;
  message.GetReflection()
      ->MutableMessage(&message, Message::descriptor()->FindFieldByNumber(field))
      ->CopyFrom(chunk);
  EXPECT_EQ(Bytes(ChunkMessageBuffer(field, chunk)), message.SerializeAsString())
      << Message::descriptor()->name() << " field " << field;
}

// The same bytes as protobuf's serialiser, for every message that carries a chunk and every
// index and size the wire form treats differently (defaults left out, multi-byte varints, a
// negative index).
TEST(ChunkWireTest, IsProtobufsOwnWireForm) {
  for (int32_t index : {0, 1, 127, 128, 300000, std::numeric_limits<int32_t>::max(), -1}) {
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{127}, size_t{128}, size_t{1} << 20}) {
      SCOPED_TRACE(::testing::Message() << "index " << index << ", " << bytes << " bytes");
      const v1::Chunk chunk = MakeChunk(index, bytes);
      ExpectProtobufsWireForm<v1::PassRequest>(v1::PassRequest::kSumFieldNumber, chunk);
      ExpectProtobufsWireForm<v1::PassRequest>(v1::PassRequest::kMeanFieldNumber, chunk);
      ExpectProtobufsWireForm<v1::ReduceRequest>(v1::ReduceRequest::kChunkFieldNumber, chunk);
      ExpectProtobufsWireForm<v1::ReduceResponse>(v1::ReduceResponse::kMeanFieldNumber, chunk);
      ExpectProtobufsWireForm<v1::SyncRequest>(v1::SyncRequest::kChunkFieldNumber, chunk);
    }
  }
}

// A chunk's bytes written into a slice of their own go out in protobuf's form too, and in
// that slice.
TEST(ChunkWireTest, ASliceOfDataIsSentAsItIs) {
  for (int32_t index : {0, 300000, -1}) {
    for (size_t bytes : {size_t{0}, size_t{5}, size_t{1} << 17}) {
      const v1::Chunk chunk = MakeChunk(index, bytes);
      grpc::Slice data(chunk.data());
      const uint8_t* where = data.begin();
      v1::PassRequest message;
      *message.mutable_sum() = chunk;
      const grpc::ByteBuffer buffer =
          ChunkMessageBuffer(v1::PassRequest::kSumFieldNumber, index, std::move(data));
      EXPECT_EQ(Bytes(buffer), message.SerializeAsString()) << index << " " << bytes;
      // (A slice of a few bytes holds them itself, so only a large one keeps its address.)
      if (bytes > 1024) EXPECT_EQ(Slices(buffer).back().begin(), where);
    }
  }
}

TEST(ChunkWireTest, ParsesBackAsTheMessage) {
  const v1::Chunk chunk = MakeChunk(42, 5000);
  const v1::PassRequest pass =
      Parse<v1::PassRequest>(ChunkMessageBuffer(v1::PassRequest::kMeanFieldNumber, chunk));
  ASSERT_TRUE(pass.has_mean());
  EXPECT_EQ(pass.mean().index(), 42);
  EXPECT_EQ(pass.mean().data(), chunk.data());
  const v1::SyncRequest sync =
      Parse<v1::SyncRequest>(ChunkMessageBuffer(v1::SyncRequest::kChunkFieldNumber, chunk));
  ASSERT_TRUE(sync.has_chunk());
  EXPECT_EQ(sync.chunk().data(), chunk.data());
}

TEST(ChunkWireTest, SharesTheChunksBytesAndHoldsThemUntilReleased) {
  auto chunk = std::make_shared<v1::Chunk>(MakeChunk(3, 4096));
  const char* data = chunk->data().data();
  std::weak_ptr<v1::Chunk> watch = chunk;
  {
    grpc::ByteBuffer buffer = ChunkMessageBuffer(2, *chunk, chunk);
    chunk.reset();
    EXPECT_FALSE(watch.expired());  // the buffer holds it
    const std::vector<grpc::Slice> slices = Slices(buffer);
    ASSERT_EQ(slices.size(), 2u);
    EXPECT_EQ(reinterpret_cast<const char*>(slices[1].begin()), data);  // not a copy
    EXPECT_EQ(slices[1].size(), 4096u);
    grpc::ByteBuffer copy = buffer;  // gRPC's copies share it too
    buffer.Clear();
    EXPECT_FALSE(watch.expired());
  }
  EXPECT_TRUE(watch.expired());
}

TEST(ChunkWireTest, TakesAChunkByValueWithoutCopyingIt) {
  v1::Chunk chunk = MakeChunk(9, 1 << 16);
  const std::string expected = chunk.data();
  const char* data = chunk.data().data();
  grpc::ByteBuffer buffer = ChunkMessageBuffer(3, std::move(chunk));
  const std::vector<grpc::Slice> slices = Slices(buffer);
  ASSERT_EQ(slices.size(), 2u);
  EXPECT_EQ(reinterpret_cast<const char*>(slices[1].begin()), data);
  EXPECT_EQ(Parse<v1::PassRequest>(buffer).mean().data(), expected);
}

TEST(ChunkWireTest, SerializedBufferIsTheMessage) {
  v1::ReduceRequest request;
  request.mutable_header()->set_run_id("run-1");
  request.mutable_header()->set_round(12);
  request.mutable_header()->set_attempt(3);
  grpc::ByteBuffer buffer = SerializedBuffer(request);
  EXPECT_EQ(Bytes(buffer), request.SerializeAsString());
  const v1::ReduceRequest parsed = Parse<v1::ReduceRequest>(buffer);
  EXPECT_EQ(parsed.header().run_id(), "run-1");
  EXPECT_EQ(parsed.header().attempt(), 3u);
}

TEST(ChunkWireTest, MethodNamesAreTheStubs) {
  EXPECT_EQ(std::string(kDataPlanePassMethod),
            "/" + std::string(v1::DataPlane::service_full_name()) + "/Pass");
  EXPECT_EQ(std::string(kDataPlaneReduceMethod),
            "/" + std::string(v1::DataPlane::service_full_name()) + "/Reduce");
}

}  // namespace
}  // namespace localsgd
