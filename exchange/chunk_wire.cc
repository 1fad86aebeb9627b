#include "exchange/chunk_wire.h"

#include <grpcpp/support/slice.h>

#include <cstdint>
#include <string>
#include <utility>

namespace localsgd {
namespace {

constexpr uint8_t kLengthDelimited = 2;

void PutVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>(value | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

void PutTag(int field, uint8_t wire_type, std::string* out) {
  PutVarint((static_cast<uint64_t>(field) << 3) | wire_type, out);
}

// The tags, the index and the lengths of a message whose field `field` is chunk `index` with
// `size` bytes of data: everything but the data.
std::string Prefix(int field, int32_t index, size_t size) {
  // Chunk's fields as proto3 writes them: a field at its default value is left out, and a
  // negative int32 is a 10-byte varint.
  std::string fields;
  if (index != 0) {
    PutTag(v1::Chunk::kIndexFieldNumber, 0, &fields);
    PutVarint(static_cast<uint64_t>(static_cast<int64_t>(index)), &fields);
  }
  if (size != 0) {
    PutTag(v1::Chunk::kDataFieldNumber, kLengthDelimited, &fields);
    PutVarint(size, &fields);
  }
  std::string prefix;
  PutTag(field, kLengthDelimited, &prefix);
  PutVarint(fields.size() + size, &prefix);
  return prefix + fields;
}

}  // namespace

grpc::ByteBuffer ChunkMessageBuffer(int field, const v1::Chunk& chunk,
                                    std::shared_ptr<const void> keepalive) {
  const std::string& data = chunk.data();
  grpc::Slice slices[2] = {grpc::Slice(Prefix(field, chunk.index(), data.size())), grpc::Slice()};
  if (data.empty()) return grpc::ByteBuffer(slices, 1);
  auto* owner = new std::shared_ptr<const void>(std::move(keepalive));
  slices[1] = grpc::Slice(
      const_cast<char*>(data.data()), data.size(),
      [](void* owner) { delete static_cast<std::shared_ptr<const void>*>(owner); }, owner);
  return grpc::ByteBuffer(slices, 2);
}

grpc::ByteBuffer ChunkMessageBuffer(int field, int32_t index, grpc::Slice data) {
  grpc::Slice slices[2] = {grpc::Slice(Prefix(field, index, data.size())), std::move(data)};
  return grpc::ByteBuffer(slices, slices[1].size() == 0 ? 1 : 2);
}

grpc::ByteBuffer SerializedBuffer(const google::protobuf::MessageLite& message) {
  grpc::Slice slice(message.ByteSizeLong());
  message.SerializeWithCachedSizesToArray(const_cast<uint8_t*>(slice.begin()));
  return grpc::ByteBuffer(&slice, 1);
}

grpc::ByteBuffer ChunkMessageBuffer(int field, v1::Chunk chunk) {
  auto owned = std::make_shared<const v1::Chunk>(std::move(chunk));
  return ChunkMessageBuffer(field, *owned, owned);
}

}  // namespace localsgd
