#include "exchange/received_chunk.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "exchange/chunk_wire.h"
#include "exchange/codec.h"

namespace localsgd {
namespace {

// Reads a varint at `*pos` of `bytes[0, size)`: false if it runs past them or past
// `max_bytes` bytes (10: a value's; protobuf reads a tag in at most 5).
bool ReadVarint(const uint8_t* bytes, size_t size, size_t* pos, uint64_t* value,
                int max_bytes = 10) {
  *value = 0;
  for (int shift = 0; shift < 7 * max_bytes && *pos < size; shift += 7) {
    const uint8_t byte = bytes[(*pos)++];
    *value |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}

// A length as protobuf reads one: at most 5 bytes, and under 2 GiB less its 16 bytes of slop
// (a longer encoding, even of a small value, fails protobuf's parse).
bool ReadLength(const uint8_t* bytes, size_t size, size_t* pos, uint64_t* value) {
  return ReadVarint(bytes, size, pos, value, 5) && *value <= INT32_MAX - 16;
}

constexpr uint8_t kIndexTag = (v1::Chunk::kIndexFieldNumber << 3) | 0;  // varint
constexpr uint8_t kDataTag = (v1::Chunk::kDataFieldNumber << 3) | 2;    // length-delimited
// Enough for the outer tag and length and the chunk's index and data tag and length.
constexpr size_t kMaxPrefix = 40;

}  // namespace

std::optional<ReceivedChunk> ReceivedChunk::Read(const grpc::ByteBuffer& wire) {
  ReceivedChunk chunk;
  chunk.wire_ = wire;  // a reference to the same slices, not a copy of their bytes
  if (!chunk.wire_.Dump(&chunk.slices_).ok()) return std::nullopt;
  const size_t total = chunk.wire_.Length();
  // The prefix, gathered from however many slices it spans.
  uint8_t prefix[kMaxPrefix];
  size_t have = 0;
  for (const grpc::Slice& slice : chunk.slices_) {
    const size_t take = std::min(slice.size(), kMaxPrefix - have);
    std::memcpy(prefix + have, slice.begin(), take);
    have += take;
    if (have == kMaxPrefix) break;
  }
  size_t pos = 0;
  uint64_t tag = 0, length = 0, index = 0, data_size = 0;
  if (!ReadVarint(prefix, have, &pos, &tag, 5) || (tag & 7) != 2 || (tag >> 3) == 0 ||
      (tag >> 3) > (uint64_t{1} << 29) - 1 || !ReadLength(prefix, have, &pos, &length) ||
      length != total - pos) {
    return std::nullopt;
  }
  if (pos < total && pos < have && prefix[pos] == kIndexTag) {
    ++pos;
    if (!ReadVarint(prefix, have, &pos, &index)) return std::nullopt;
  }
  if (pos < total) {
    if (pos >= have || prefix[pos] != kDataTag) return std::nullopt;
    ++pos;
    if (!ReadLength(prefix, have, &pos, &data_size) || data_size != total - pos) {
      return std::nullopt;
    }
  }
  chunk.field_ = static_cast<int>(tag >> 3);
  chunk.index_ = static_cast<int32_t>(static_cast<uint32_t>(index));  // int32: the low 32 bits
  chunk.size_ = static_cast<size_t>(data_size);
  // The data: the bytes after the prefix, in the slices as they are.
  size_t skip = pos;
  for (const grpc::Slice& slice : chunk.slices_) {
    const char* begin = reinterpret_cast<const char*>(slice.begin());
    size_t size = slice.size();
    const size_t skipped = std::min(skip, size);
    skip -= skipped;
    if (size > skipped) chunk.data_.emplace_back(begin + skipped, size - skipped);
  }
  return chunk;
}

ReceivedChunk ReceivedChunk::Of(int field, const v1::Chunk& chunk,
                                std::shared_ptr<const void> keepalive) {
  std::optional<ReceivedChunk> read = Read(ChunkMessageBuffer(field, chunk, std::move(keepalive)));
  return std::move(*read);  // ChunkMessageBuffer writes this form
}

ReceivedChunk ReceivedChunk::Of(int field, v1::Chunk chunk) {
  auto owned = std::make_shared<const v1::Chunk>(std::move(chunk));
  return Of(field, *owned, owned);
}

absl::Status ReceivedChunk::DecodeFp32(absl::Span<float> out) const {
  if (size_ != out.size() * sizeof(float)) {
    return absl::InvalidArgumentError(absl::StrCat("chunk data: ", size_, " bytes, expected ",
                                                   out.size() * sizeof(float), " for ", out.size(),
                                                   " values in fp32"));
  }
  char* bytes = reinterpret_cast<char*>(out.data());
  for (absl::string_view piece : data_) {
    std::memcpy(bytes, piece.data(), piece.size());
    bytes += piece.size();
  }
  return AllFinite(out) ? absl::OkStatus()
                        : absl::InvalidArgumentError("chunk data: decodes to NaN or infinity");
}

absl::Status ReceivedChunk::Decode(v1::Codec codec, absl::Span<float> out) const {
  if (codec == v1::CODEC_FP32 || codec == v1::CODEC_UNSPECIFIED) return DecodeFp32(out);
  if (data_.size() == 1) return localsgd::Decode(codec, data_.front(), out);
  std::string bytes;
  bytes.reserve(size_);
  for (absl::string_view piece : data_) bytes.append(piece.data(), piece.size());
  return localsgd::Decode(codec, bytes, out);
}

}  // namespace localsgd
