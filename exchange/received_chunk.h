#ifndef LOCALSGD_EXCHANGE_RECEIVED_CHUNK_H_
#define LOCALSGD_EXCHANGE_RECEIVED_CHUNK_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/localsgd/v1/averaging.pb.h"
#include "proto/localsgd/v1/run_spec.pb.h"

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
  // The data decoded with `codec` into `out`, with Decode's checks (fp32: DecodeFp32; other
  // codecs gather the pieces first when there are several).
  absl::Status Decode(v1::Codec codec, absl::Span<float> out) const;

  // Walks the data as fp32 values where they lie, in runs: calls `run(bytes, first, n)` with
  // `bytes` the n whole values from value `first` on (not aligned: read them with memcpy), in
  // order. A value split between slices (it may span several small ones) is gathered and
  // given as a run of its own. Bytes after the last whole value are not given: check size()
  // first.
  template <typename Run>
  void ForEachFp32Run(Run&& run) const {
    char carry[sizeof(float)];
    size_t carried = 0;
    size_t first = 0;
    for (absl::string_view piece : data_) {
      const char* in = piece.data();
      size_t left = piece.size();
      if (carried > 0) {
        const size_t take = std::min(sizeof(float) - carried, left);
        std::memcpy(carry + carried, in, take);
        carried += take;
        in += take;
        left -= take;
        if (carried < sizeof(float)) continue;  // the value goes on in the next slice
        run(static_cast<const char*>(carry), first, size_t{1});
        ++first;
        carried = 0;
      }
      const size_t whole = left / sizeof(float);
      if (whole > 0) run(in, first, whole);
      first += whole;
      in += whole * sizeof(float);
      left -= whole * sizeof(float);
      std::memcpy(carry, in, left);
      carried = left;
    }
  }

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

#endif  // LOCALSGD_EXCHANGE_RECEIVED_CHUNK_H_
