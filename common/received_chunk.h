#ifndef LOCALSGD_COMMON_RECEIVED_CHUNK_H_
#define LOCALSGD_COMMON_RECEIVED_CHUNK_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/localsgd/v1/averaging.pb.h"

namespace localsgd {

// A chunk read where gRPC received it (docs/design.md, "Copies"): a message whose one set field
// is a Chunk, in the form ChunkMessageBuffer writes (protobuf's own), read without copying the
// chunk's bytes. `data()` views them, in pieces, in the message's own slices, which this object
// keeps alive; `wire()` is the whole message, to pass on as it came. Move-only.
class ReceivedChunk {
 public:
  // Reads `wire`: nullopt when it is not in that form (fields in another order, a field
  // protobuf would skip, bytes after the chunk, ...), which a typed parse then reads instead.
  static std::optional<ReceivedChunk> Read(const grpc::ByteBuffer& wire);
  // A typed chunk as field `field` of a message, in that form; `keepalive` owns `chunk`.
  static ReceivedChunk Of(int field, const v1::Chunk& chunk, std::shared_ptr<const void> keepalive);
  static ReceivedChunk Of(int field, v1::Chunk chunk);

  ReceivedChunk(ReceivedChunk&&) = default;
  ReceivedChunk& operator=(ReceivedChunk&&) = default;
  ReceivedChunk(const ReceivedChunk&) = delete;
  ReceivedChunk& operator=(const ReceivedChunk&) = delete;

  int field() const { return field_; }
  int32_t index() const { return index_; }
  // The chunk's data: size() bytes in order, split wherever gRPC's slices are.
  size_t size() const { return size_; }
  const std::vector<absl::string_view>& data() const { return data_; }
  const grpc::ByteBuffer& wire() const { return wire_; }

  // The data as fp32 values into `out` (little-endian floats, as the fp32 codec writes them):
  // INVALID_ARGUMENT, naming the sizes, unless it holds out.size() values; INVALID_ARGUMENT if
  // one is NaN or infinite (`out` then holds them all the same).
  absl::Status DecodeFp32(absl::Span<float> out) const;

 private:
  ReceivedChunk() = default;

  grpc::ByteBuffer wire_;
  std::vector<grpc::Slice> slices_;  // data_ views these (a small slice holds its bytes itself)
  std::vector<absl::string_view> data_;
  int field_ = 0;
  int32_t index_ = 0;
  size_t size_ = 0;
};

}  // namespace localsgd

#endif  // LOCALSGD_COMMON_RECEIVED_CHUNK_H_
