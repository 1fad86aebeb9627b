#ifndef LOCALSGD_EXCHANGE_CHUNK_WIRE_H_
#define LOCALSGD_EXCHANGE_CHUNK_WIRE_H_

#include <google/protobuf/message_lite.h>
#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <memory>

#include "proto/localsgd/v1/averaging.pb.h"

namespace localsgd {

// A message whose one set field is `field`, a Chunk, in the wire form gRPC sends, without
// copying the chunk's bytes (docs/design.md, "Copies"): one small slice with the tags, the
// index and the lengths, then a slice over the chunk's data itself. Protobuf's serialiser
// would copy the data into a new buffer; this is what a parser reads as the same message
// (e.g. PassRequest{sum: chunk} for field 2).
//
// This form shares `chunk`'s bytes, which must not change while gRPC may still send them:
// `keepalive` owns them and is released when gRPC lets go of the buffer.
grpc::ByteBuffer ChunkMessageBuffer(int field, const v1::Chunk& chunk,
                                    std::shared_ptr<const void> keepalive);
// This form takes the chunk.
grpc::ByteBuffer ChunkMessageBuffer(int field, v1::Chunk chunk);
// This form sends `data` as the bytes of chunk `index`: a slice they were written into (a
// grpc::Slice(n), for one, is not zero-filled first, as a string's resize would be).
grpc::ByteBuffer ChunkMessageBuffer(int field, int32_t index, grpc::Slice data);

// Any message in protobuf's wire form (serialised, so copied: for small ones such as headers),
// for the same raw calls.
grpc::ByteBuffer SerializedBuffer(const google::protobuf::MessageLite& message);

// The full names of DataPlane's methods, for raw calls that send such buffers (what the
// generated stub calls them).
inline constexpr char kDataPlanePassMethod[] = "/localsgd.v1.DataPlane/Pass";
inline constexpr char kDataPlaneReduceMethod[] = "/localsgd.v1.DataPlane/Reduce";

}  // namespace localsgd

#endif  // LOCALSGD_EXCHANGE_CHUNK_WIRE_H_
